package jsonenc

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestMatchesEncodingJSON: strings and floats come out as encoding/json
// writes them, across the eight-byte fast path's edges.
func TestMatchesEncodingJSON(t *testing.T) {
	strs := []string{"", "plain", "<a href=\"x\">&</a>", "tab\there\nnew\rline\x00\x01\x1f\x7f",
		"\u2028\u2029", "caf\u00e9 \U0001F600", "bad \xff\xfe utf8 \xc3", `back\slash "quote"`,
		strings.Repeat("abcdefg", 9) + "<", strings.Repeat("é", 13) + "\x80"}
	for i := range 40 {
		strs = append(strs, strings.Repeat("x", i)+"\n"+strings.Repeat("y", 40-i))
	}
	for _, s := range strs {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Errorf("%q: got %s, want %s", s, got, want)
		}
	}
	for _, f := range []float64{0, 1, -1, 0.217, 1e-7, 1e-6, 123456.789, 1e20, 1e21, 3e21, -2.5e-9, math.MaxFloat64, math.SmallestNonzeroFloat64} {
		want, _ := json.Marshal(f)
		if got := AppendFloat(nil, f); string(got) != string(want) {
			t.Errorf("%g: got %s, want %s", f, got, want)
		}
	}
}
