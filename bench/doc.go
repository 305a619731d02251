// Package bench holds sluice's benchmark programs. They print, from one
// run, sluice's figures side by side with the floors they are measured
// against, as ratios; nothing here asserts on time. The exception is
// soak/ (make soak), which holds a real sluiced under load and fails on
// any loss; its one bound on time is issue 16's: new clients served
// within 100 ms (at p95) beside 1,000 idle and slowloris connections.
package bench
