// Package jsonenc writes JSON strings and numbers exactly as encoding/json
// does (HTML escaping on, U+2028 and U+2029 escaped, invalid UTF-8 as
// U+FFFD, floats as ES6 numbers), without reflection: the ledger's records
// (audit) and a call's result (daemon) are encoded by hand with it, and
// their tests hold each to encoding/json's output.
package jsonenc

import (
	"math"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

// AppendFloat is encoding/json's float64 encoding (ES6 number
// formatting); f is finite.
func AppendFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json does
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// jsonSafe marks the ASCII bytes encoding/json copies as they are with
// HTML escaping on: printable, and none of " \ < > &.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

const hexDigits = "0123456789abcdef"

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// zeroBytes flags with its high bit each byte of x that is 0, lessBytes
// each below n (n ≤ 128). Bytes above a flagged one may be flagged
// falsely (a borrow), so only the lowest flag is exact: enough to find
// the first byte that needs a look.
func zeroBytes(x uint64) uint64         { return (x - ones) &^ x & highs }
func lessBytes(x uint64, n byte) uint64 { return (x - ones*uint64(n)) &^ x & highs }

// lookAt returns the index (0-7) of the first of the 8 bytes in x (little
// endian) that is not jsonSafe: a control byte, " \ < > &, or a byte of a
// multi-byte or invalid sequence; 8 if none.
func lookAt(x uint64) int {
	m := x&highs | lessBytes(x, 0x20) | zeroBytes(x^(ones*'"')) | zeroBytes(x^(ones*'\\')) |
		zeroBytes(x^(ones*'<')) | zeroBytes(x^(ones*'>')) | zeroBytes(x^(ones*'&'))
	return bits.TrailingZeros64(m) / 8
}

// AppendString is encoding/json's string encoding with HTML escaping.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time while none needs a look: the common case
		// of source text, where a byte-wise loop is most of the cost.
		if i+8 <= len(s) {
			x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
				uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
			k := lookAt(x)
			i += k
			if k == 8 {
				continue
			}
		}
		if c := s[i]; c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
