package foldname

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// IsKey reports whether name is its own key: lower-case ASCII (no byte
// outside 0x00..0x7F, none of A..Z) that does not end in a dot or a space.
func IsKey(name string) bool { return isFolded(name) && !trailing(name) }

// isFolded reports whether s is its own fold: lower-case ASCII.
func isFolded(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

func trailing(s string) bool {
	return s != "" && (s[len(s)-1] == '.' || s[len(s)-1] == ' ')
}

// Key returns name's key: what a case-insensitive file system compares.
// It allocates only when the key differs from name.
func Key(name string) string {
	if IsKey(name) {
		return name
	}
	var buf [256]byte
	return string(AppendKey(buf[:0], name))
}

// AppendKey appends name's key to dst.
func AppendKey(dst []byte, name string) []byte {
	start := len(dst)
	dst = AppendFold(dst, name)
	end := len(dst)
	for end > start && (dst[end-1] == '.' || dst[end-1] == ' ') {
		end--
	}
	if end == start {
		return dst // only dots and spaces: kept, nothing would be left
	}
	return dst[:end]
}

// Fold returns s with each rune folded (case, expansions, ignorables) but
// trailing dots and spaces kept: for the literal parts of a glob, of which
// only the last is trimmed (see TrimTrailing).
func Fold(s string) string {
	if isFolded(s) {
		return s
	}
	var buf [256]byte
	b := AppendFold(buf[:0], s)
	if string(b) == s {
		return s
	}
	return string(b)
}

// TrimTrailing drops the trailing dots and spaces of s, as AppendKey does
// for a whole name, unless nothing would be left.
func TrimTrailing(s string) string {
	n := len(s)
	for n > 0 && (s[n-1] == '.' || s[n-1] == ' ') {
		n--
	}
	if n == 0 {
		return s
	}
	return s[:n]
}

// AppendFold appends s folded rune by rune to dst. A byte that is not
// valid UTF-8 is kept as it is: file systems that fold reject such names
// or compare them byte for byte.
func AppendFold(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w == 1 {
			dst = append(dst, c)
			i++
			continue
		}
		dst = appendRune(dst, r)
		i += w
	}
	return dst
}

func appendRune(dst []byte, r rune) []byte {
	if Ignorable(r) {
		return dst
	}
	e, r := FoldRune(r)
	if r < 0 {
		return append(dst, e...)
	}
	return utf8.AppendRune(dst, r)
}

// FoldRune returns r's fold: a single rune (and ""), or, when r folds to
// several runes or to none (an ignorable), their string and -1.
func FoldRune(r rune) (string, rune) {
	if Ignorable(r) {
		return "", -1
	}
	if e := expansion(r); e != "" {
		return e, -1
	}
	if d, ok := singleton(r); ok {
		r = d
	}
	r = unicode.ToLower(unicode.ToUpper(r))
	if e := expansion(r); e != "" {
		return e, -1
	}
	return "", r
}

// Ignorable reports whether r is dropped from keys: the Unicode
// Default_Ignorable_Code_Point property (which Linux casefolding ignored
// before 6.13), approximated from above by every format character (Cf),
// every variation selector and Other_Default_Ignorable_Code_Point.
func Ignorable(r rune) bool {
	return r >= 0xAD && (unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Variation_Selector, r) ||
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r))
}

// expansion is the full case folding (CaseFolding.txt status F) of the
// runes whose folding spells Latin letters, applied after the simple
// mapping (so ẞ arrives here as ß).
func expansion(r rune) string {
	switch r {
	case 'ß':
		return "ss"
	case 0xFB00:
		return "ff"
	case 0xFB01:
		return "fi"
	case 0xFB02:
		return "fl"
	case 0xFB03:
		return "ffi"
	case 0xFB04:
		return "ffl"
	case 0xFB05, 0xFB06:
		return "st"
	case 0x0130: // U+0130 İ: its lower case is i, its full folding i + U+0307
		return "i\u0307"
	}
	return ""
}

// singleton maps the canonical singleton decompositions outside the CJK
// compatibility ideographs, which NFD (and so Linux casefolding) applies.
// The Kelvin sign, the Ohm and the Angstrom signs need no entry: their
// lower case already is k, ω and å.
func singleton(r rune) (rune, bool) {
	for _, p := range singletons {
		if p[0] == r {
			return p[1], true
		}
	}
	return 0, false
}

var singletons = [...][2]rune{
	{0x0340, 0x0300}, {0x0341, 0x0301}, {0x0343, 0x0313}, {0x0374, 0x02B9},
	{0x037E, ';'}, {0x0387, 0x00B7}, {0x1FEF, '`'}, {0x1FFD, 0x00B4},
	{0x2000, 0x2002}, {0x2001, 0x2003}, {0x2329, 0x3008}, {0x232A, 0x3009},
}

// Equal reports whether a and b may name one file.
func Equal(a, b string) bool { return a == b || Key(a) == Key(b) }

// HasPrefix reports whether name starts with prefix, byte for byte or as
// keys: a case-insensitive disk opens ".SLUICE-TMP-x" for ".sluice-tmp-x".
func HasPrefix(name, prefix string) bool {
	return strings.HasPrefix(name, prefix) || strings.HasPrefix(Key(name), Fold(prefix))
}

// Variants calls f with r and each rune whose fold could be r's: the
// runes a glob class is tested against, so that [a-z] matches the key of
// "A" and [K] that of the Kelvin sign. It stops when f returns true and
// reports whether f did.
func Variants(r rune, f func(rune) bool) bool {
	if f(r) {
		return true
	}
	// SimpleFold walks the orbit; bounded, as it need not come back to r
	// for a rune outside every orbit (ı goes to I, and I's orbit is {I, i}).
	v := r
	for range 8 {
		if v = unicode.SimpleFold(v); v == r {
			break
		}
		if f(v) {
			return true
		}
	}
	if u := unicode.ToUpper(r); u != r && f(u) {
		return true
	}
	if t := unicode.ToTitle(r); t != r && f(t) {
		return true
	}
	if r == 'i' && f(0x0131) { // dotless ı: NTFS upcases it to I
		return true
	}
	for _, p := range singletons {
		if p[1] == r && f(p[0]) {
			return true
		}
	}
	return false
}
