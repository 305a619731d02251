package udiff

import (
	"fmt"
	"strings"
	"testing"
)

// TestUnifiedDiff checks the diff against what diff -u writes.
// docs/security.md, "The second review (Hardening II)", "Found by reading"
func TestUnifiedDiff(t *testing.T) {
	for _, c := range []struct{ old, new, want string }{
		{"a\nb\nc\n", "a\nb\nc\n", "--- a/f\n+++ b/f\n"},
		{"a\n", "a", "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+a\n\\ No newline at end of file\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "1\nX\n3\n4\n5\n6\n7\n8\n9\n10\nY\n12\n",
			"--- a/f\n+++ b/f\n@@ -1,5 +1,5 @@\n 1\n-2\n+X\n 3\n 4\n 5\n@@ -8,5 +8,5 @@\n 8\n 9\n 10\n-11\n+Y\n 12\n"},
		{"a\nb\n", "", "--- a/f\n+++ b/f\n@@ -1,2 +0,0 @@\n-a\n-b\n"},
	} {
		got, trunc, _ := Unified("f", "f", c.old, c.new)
		if got != c.want || trunc {
			t.Errorf("diff %q -> %q:\n%s\nwant\n%s", c.old, c.new, got, c.want)
		}
	}
	// Work is bounded: 10,001 lines are not diffed; 5,000 changed lines
	// still give a correct (if not minimal) diff, cut at 64 KiB.
	if _, trunc, tooLarge := Unified("f", "f", strings.Repeat("x\n", 10_001), ""); !trunc || !tooLarge {
		t.Error("10,001 lines were diffed")
	}
	var a, b strings.Builder
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&a, "a%d\n", i)
		fmt.Fprintf(&b, "b%d\n", i)
	}
	d, trunc, _ := Unified("f", "f", a.String(), b.String())
	if !trunc || len(d) > MaxBytes || !strings.HasPrefix(d, "--- a/f\n+++ b/f\n@@ -1,5000 +1,5000 @@\n-a0\n") {
		t.Errorf("large diff: %d bytes, truncated %v: %.80q", len(d), trunc, d)
	}
}
