// Package bench holds sluice's benchmark programs. They print, from one
// run, sluice's figures side by side with the floors they are measured
// against, as ratios; nothing here asserts on time.
package bench
