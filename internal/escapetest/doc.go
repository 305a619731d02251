// Package escapetest holds sluice's one table of path escape cases and the
// fixture they run against. The resolver tests (openat2 and the os.Root
// fallback), the daemon tests and the black-box e2e tests over the real
// socket all drive this same table, so a case added here is checked
// everywhere (the habit of rootTestCases in Go's os/root_test.go).
package escapetest
