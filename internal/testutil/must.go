package testutil

import (
	"os"
	"testing"
)

// Must fails the test at once if err is not nil: for fixture set-up, where
// a dropped error would let a test pass for the wrong reason (a secret the
// probes look for that was never written is a secret never seen).
func Must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// WriteFile is os.WriteFile that fails the test if the file cannot be
// written.
func WriteFile(tb testing.TB, path string, data []byte, perm os.FileMode) {
	tb.Helper()
	Must(tb, os.WriteFile(path, data, perm))
}
