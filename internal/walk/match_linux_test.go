//go:build linux

package walk

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"testing"
)

// naiveLines is the definition: each line on its own, without its
// newline, numbered from 1 (a final newline ends the last line; an
// empty file has none, as for grep).
func naiveLines(re *regexp.Regexp, buf []byte) []string {
	var out []string
	if len(buf) == 0 {
		return nil
	}
	ls := bytes.Split(buf, []byte{'\n'})
	if len(buf) > 0 && buf[len(buf)-1] == '\n' {
		ls = ls[:len(ls)-1]
	}
	for i, l := range ls {
		if re.Match(l) {
			out = append(out, fmt.Sprintf("%d:%s", i+1, l))
		}
	}
	return out
}

func matchedLines(m *matcher, buf []byte) []string {
	var out []string
	m.lines(buf, func(n int, l []byte) bool {
		out = append(out, fmt.Sprintf("%d:%s", n, l))
		return true
	})
	return out
}

var matchPatterns = []string{
	"NEEDLE", "", "x*", `\B`, `\bfoo\b`, `\Bfoo`, `foo\B`, `^foo`, `foo$`, `^$`, `(?m)^foo$`, `\Afoo`, `foo\z`,
	`o\no`, `(?s)o.o`, `[^a]+`, `\s+foo`, `a|^b`, `(?i)FOO`, `.`, `\n`, `f.o`,
}

var matchTexts = []string{
	"", "\n", "\n\n", "foo", "foo\n", "a foo\nfoo b\nxfoo\nfoox\n\nfoo", "NEEDLE\nNEEDLE\n",
	"o\no\n", "b\nb\na\n", "  foo\r\nfoo\r\n", "\x00foo", "aaa\n\nbbb\n \n",
}

// TestLines: jumping from match to match finds exactly the lines that
// matching each line on its own finds, and the slow path does too.
func TestLines(t *testing.T) {
	for _, p := range matchPatterns {
		re := regexp.MustCompile(p)
		for _, txt := range matchTexts {
			want := naiveLines(re, []byte(txt))
			for _, whole := range []bool{false, !hasAnchor(re)} {
				m := &matcher{re: re, whole: whole}
				if got := matchedLines(m, []byte(txt)); !slices.Equal(got, want) {
					t.Errorf("%q on %q (whole %v): got %q, want %q", p, txt, whole, got, want)
				}
			}
		}
	}
	if !hasAnchor(regexp.MustCompile(`a|(?m:^b)`)) || hasAnchor(regexp.MustCompile(`\bNEEDLE\b`)) {
		t.Error("hasAnchor")
	}
}

// FuzzLines: for any pattern and text, what the search reports is what
// matching line by line reports.
func FuzzLines(f *testing.F) {
	for _, p := range matchPatterns {
		for _, txt := range matchTexts {
			f.Add(p, txt)
		}
	}
	f.Fuzz(func(t *testing.T, p, txt string) {
		re, err := regexp.Compile(p)
		if err != nil {
			return
		}
		want := naiveLines(re, []byte(txt))
		if got := matchedLines(newMatcher(re), []byte(txt)); !slices.Equal(got, want) {
			t.Fatalf("%q on %q: got %q, want %q", p, txt, got, want)
		}
	})
}
