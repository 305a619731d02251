// Package testutil has helpers for sluice's tests: a TestMain that fails
// on leaked fds and goroutines, and a root check that fails loudly.
package testutil
