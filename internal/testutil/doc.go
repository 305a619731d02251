// Package testutil has helpers for sluice's tests: a TestMain that fails
// on leaked fds and goroutines, a root check that fails loudly, and the
// helpers more than one package's tests need (a buffer a writer and the
// test share, an sd_notify socket, the swap loop of race tests).
package testutil
