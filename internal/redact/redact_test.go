package redact

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func short(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "<sha256:" + hex.EncodeToString(sum[:8]) + ">"
}

// TestString: text over the bound is cut, at a rune boundary, to at most
// the bound, with the whole's length and digest (docs/security.md, "The
// third review": a 32 KiB malformed request line was copied into every
// proxy record).
func TestString(t *testing.T) {
	long := strings.Repeat("x", 32<<10)
	for _, c := range []struct {
		name string
		s    string
		max  int
	}{
		{"short", "GET / HTTP/1.1", 256},
		{"exact", strings.Repeat("a", 256), 256},
		{"one over", strings.Repeat("a", 257), 256},
		{"request line", "read request: malformed HTTP request \"" + long + "\"", 256},
		{"multibyte at the cut", strings.Repeat("é", 400), 256},
		{"bound below the minimum", long, 10},
	} {
		got := String(c.s, c.max)
		bound := max(c.max, MinBound)
		switch {
		case len(c.s) <= bound:
			if got != c.s {
				t.Errorf("%s: %q changed to %q", c.name, c.s, got)
			}
			continue
		case len(got) > bound:
			t.Errorf("%s: %d bytes, want at most %d", c.name, len(got), bound)
		case !utf8.ValidString(got):
			t.Errorf("%s: cut inside a rune: %q", c.name, got)
		case !strings.HasSuffix(got, "…[cut: "+itoa(len(c.s))+" bytes, "+Digest(c.s)+"]"):
			t.Errorf("%s: no marker with the length and digest of the whole: %q", c.name, got)
		case !strings.HasPrefix(c.s, got[:strings.Index(got, "…[cut: ")]):
			t.Errorf("%s: kept text is not a prefix of the original: %q", c.name, got)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestURL: a recorded URL keeps scheme, authority, path and parameter
// names in clear, and no query or fragment value (docs/security.md, "The
// third review": a fetch's API key in its query string was recorded
// verbatim).
func TestURL(t *testing.T) {
	many := "https://h.example/p?"
	for i := range 40 {
		if i > 0 {
			many += "&"
		}
		many += "k" + itoa(i) + "=v" + itoa(i)
	}
	for _, c := range []struct{ raw, want string }{
		{"https://api.example/x", "https://api.example/x"},
		{"https://api.example/x?api_key=SECRET123", "https://api.example/x?api_key=" + short("SECRET123")},
		{"https://api.example/x?key=a%2Bb&q=rust", "https://api.example/x?key=" + short("a%2Bb") + "&q=" + short("rust")},
		{"https://api.example/x?SECRET123", "https://api.example/x?" + short("SECRET123")},
		{"https://api.example/x?debug=&a=1&", "https://api.example/x?debug=&a=" + short("1") + "&"},
		{"https://api.example/x?", "https://api.example/x?"},
		{"https://api.example/x?&&", "https://api.example/x?&&"},
		{"https://api.example/x#access_token=SECRET123", "https://api.example/x#" + short("access_token=SECRET123")},
		{"https://api.example/x?a=1#f?b=2", "https://api.example/x?a=" + short("1") + "#" + short("f?b=2")},
		{"https://api.example/x?a=b=c", "https://api.example/x?a=" + short("b=c")},
		{"localhost:443", "localhost:443"},
	} {
		if got := URL(c.raw, 512); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.raw, got, c.want)
		}
	}
	got := URL(many, 512)
	rest := many[strings.Index(many, "k32="):]
	if !strings.Contains(got, "&k31="+short("v31")+"&<8 more, "+Digest(rest)+">") || strings.Contains(got, "k32") {
		t.Errorf("40 parameters: %q, want 32 listed and 8 more counted", got)
	}
	longName := strings.Repeat("n", 100)
	if got := URL("https://h/?"+longName+"=SECRET123", 512); strings.Contains(got, longName) || len(got) > 120 || strings.Contains(got, "SECRET") {
		t.Errorf("a 100-byte name: %q", got)
	}
	longPath := "http://h/" + strings.Repeat("p", 4000) + "?key=SECRET123"
	if got := URL(longPath, 512); !strings.Contains(got, "…[cut: ") || strings.Contains(got, "SECRET") || len(got) > 512+100 {
		t.Errorf("a 4000-byte path: %d bytes, %q", len(got), got)
	}
	// The query of a 32 KiB request target costs at most MaxParams entries.
	flood := "http://h/?" + strings.Repeat("a=SECRET123&", 3000)
	if got := URL(flood, 512); len(got) > 2048 || strings.Contains(got, "SECRET") {
		t.Errorf("a 36 KB query: %d bytes", len(got))
	}
}
