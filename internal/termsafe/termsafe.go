package termsafe

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape returns s with every byte or character a terminal would act on
// or not draw written as a visible escape, and how many it escaped:
//
//   - invalid UTF-8, byte by byte: \xff
//   - C0 controls and DEL: \r, \n, \t, \x1b (ESC, so no CSI, OSC or other
//     escape sequence survives: its introducer is shown, not acted on)
//   - C1 controls (U+0080–U+009F, among them the one-character CSI U+009B
//     and OSC U+009D): \u009b
//   - every character Unicode does not class as graphic (format
//     characters, Cf: bidi embeddings, overrides and isolates U+202A–U+202E
//     and U+2066–U+2069, the marks U+200E, U+200F and U+061C, zero-width
//     U+200B–U+200D, U+2060, U+FEFF, the soft hyphen U+00AD, tag
//     characters U+E0000–U+E007F; line and paragraph separators U+2028,
//     U+2029; private use; surrogates; unassigned code points): \u202e,
//     \U000e0041
//   - graphic characters that are default-ignorable, drawn as nothing:
//     variation selectors (U+FE00–U+FE0F, U+E0100–U+E01EF, the Mongolian
//     ones), the Hangul fillers U+115F, U+1160, U+3164, U+FFA0, the
//     combining grapheme joiner U+034F, and the rest of Unicode's
//     Other_Default_Ignorable_Code_Point.
//
// text is for multi-line text shown as text (a diff, a body): there a
// newline ends a line and a tab is written as is, as neither can hide or
// overwrite what is already drawn; every other control is escaped. In a
// single-line field (a URL, a path, an argument) newlines and tabs are
// escaped too, so one value cannot pose as two or shift a table's columns.
//
// A backslash is written as is: text that already spells `\x1b` reads the
// same as an escaped ESC, which is why a caller shows the count (n > 0
// means something was escaped; n == 0 means every backslash is literal).
func Escape(s string, text bool) (out string, n int) {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size <= 1) || hidden(r, text) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s, 0
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
			n++
		case !hidden(r, text):
			b.WriteString(s[i : i+size])
		default:
			b.WriteString(escapeRune(r))
			n++
		}
		i += size
	}
	return b.String(), n
}

// hidden reports whether r must be escaped.
func hidden(r rune, text bool) bool {
	switch {
	case r == '\n' || r == '\t':
		return !text
	case r < 0x20 || r == 0x7f:
		return true
	case r < 0x7f:
		return false
	}
	return !unicode.IsGraphic(r) ||
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) ||
		unicode.Is(unicode.Variation_Selector, r)
}

func escapeRune(r rune) string {
	switch r {
	case '\r':
		return `\r`
	case '\n':
		return `\n`
	case '\t':
		return `\t`
	}
	switch {
	case r < 0x80:
		return `\x` + hex2(byte(r))
	case r <= 0xffff:
		return `\u` + pad(strconv.FormatInt(int64(r), 16), 4)
	}
	return `\U` + pad(strconv.FormatInt(int64(r), 16), 8)
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&0xf]})
}

func pad(h string, w int) string { return strings.Repeat("0", w-len(h)) + h }
