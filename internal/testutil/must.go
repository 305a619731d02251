package testutil

import "testing"

// Must fails the test at once if err is not nil: for fixture set-up, where
// a dropped error would let a test pass for the wrong reason (a secret the
// probes look for that was never written is a secret never seen).
func Must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
