package udiff

import (
	"fmt"
	"math/rand/v2"
	"strconv"
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
		{"a\r\nb\r\n", "a\r\nc\r\n", "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+c\r\n"},
	} {
		got, trunc, _ := Unified("f", "f", c.old, c.new)
		if got != c.want || trunc {
			t.Errorf("diff %q -> %q:\n%s\nwant\n%s", c.old, c.new, got, c.want)
		}
	}
	if got, _, _ := Unified("", "n", "", "x\n"); got != "--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n" {
		t.Errorf("creation diff:\n%s", got)
	}
	// Work is bounded: 10,001 lines are not diffed; 5,000 changed lines
	// still give a correct (if not minimal) diff, cut at 64 KiB.
	if _, trunc, tooLarge := Unified("f", "f", strings.Repeat("x\n", MaxLines+1), ""); !trunc || !tooLarge {
		t.Error("10,001 lines were diffed")
	}
	var a, b strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&a, "a%d\n", i)
		fmt.Fprintf(&b, "b%d\n", i)
	}
	d, trunc, _ := Unified("f", "f", a.String(), b.String())
	if !trunc || len(d) > MaxBytes || !strings.HasPrefix(d, "--- a/f\n+++ b/f\n@@ -1,5000 +1,5000 @@\n-a0\n") {
		t.Errorf("large diff: %d bytes, truncated %v: %.80q", len(d), trunc, d)
	}
}

// TestUnifiedApplies: applying the diff to old gives new, for random
// edits of random texts (with and without a final newline).
func TestUnifiedApplies(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"a\n", "b\n", "c\n", "d\n", "a", "x\r\n"}
	gen := func(n int) string {
		var s strings.Builder
		for range n {
			w := words[r.IntN(len(words))]
			if w == "a" {
				w = "a\n"
			}
			s.WriteString(w)
		}
		if r.IntN(3) == 0 {
			s.WriteString("tail")
		}
		return s.String()
	}
	for i := range 2000 {
		old, new := gen(r.IntN(30)), gen(r.IntN(30))
		d, trunc, _ := Unified("f", "f", old, new)
		if trunc {
			t.Fatalf("case %d truncated", i)
		}
		got, err := apply(old, d)
		if err != nil || got != new {
			t.Fatalf("case %d: apply(%q, diff) = %q, %v; want %q\n%s", i, old, got, err, new, d)
		}
	}
}

// apply is a strict patch: context and removed lines must match.
func apply(old, diff string) (string, error) {
	a := splitLines(old)
	lines := strings.SplitAfter(diff, "\n")
	var out []string
	ai := 0
	for i := 2; i < len(lines) && lines[i] != ""; {
		h := lines[i]
		var as, bs string
		if _, err := fmt.Sscanf(h, "@@ -%s +%s @@", &as, &bs); err != nil {
			return "", fmt.Errorf("hunk header %q: %v", h, err)
		}
		start, _ := strconv.Atoi(strings.Split(as, ",")[0])
		if !strings.Contains(as, ",") || !strings.HasSuffix(as, ",0") {
			start-- // 1-based, unless the count is 0
		}
		for ai < start {
			out = append(out, a[ai])
			ai++
		}
		i++
		for i < len(lines) && lines[i] != "" && !strings.HasPrefix(lines[i], "@@") {
			l := lines[i]
			op, text := l[0], l[1:]
			if i+1 < len(lines) && lines[i+1] == "\\ No newline at end of file\n" {
				text = strings.TrimSuffix(text, "\n")
				i++
			}
			switch op {
			case ' ', '-':
				if ai >= len(a) || a[ai] != text {
					return "", fmt.Errorf("line %d: have %q, diff says %q", ai+1, a[min(ai, len(a)-1)], text)
				}
				if op == ' ' {
					out = append(out, text)
				}
				ai++
			case '+':
				out = append(out, text)
			}
			i++
		}
	}
	out = append(out, a[ai:]...)
	return strings.Join(out, ""), nil
}
