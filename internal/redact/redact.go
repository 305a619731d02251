package redact

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MinBound is the smallest bound String keeps text under: below it the
// marker alone would not fit.
const MinBound = 128

// String returns s when it is at most max bytes. Otherwise it returns a
// prefix of s, cut at a UTF-8 boundary, followed by a marker that names
// the whole's length and digest:
//
//	GET /aaaa…[cut: 32768 bytes, sha256:<64 hex>]
//
// so the result is at most max bytes (max below MinBound counts as
// MinBound), and a reviewer holding the original can still match it.
func String(s string, max int) string {
	if max < MinBound {
		max = MinBound
	}
	if len(s) <= max {
		return s
	}
	m := marker(s)
	keep := max - len(m)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + m
}

func marker(s string) string {
	return "…[cut: " + strconv.Itoa(len(s)) + " bytes, " + Digest(s) + "]"
}

// Digest is "sha256:" and the hex of s's sha256.
func Digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ShortDigest is a value's stand-in in a recorded URL: "<sha256:" and the
// first 16 hex digits (64 bits) of its sha256, then ">". Enough to check
// a known key against, and to tell two values apart; it hides a value
// only as well as the value's own entropy does (a 4-digit PIN is found by
// trying them all, an API key is not).
func ShortDigest(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "<sha256:" + hex.EncodeToString(sum[:8]) + ">"
}

// Query bounds: how many parameters a recorded URL lists by name, and how
// long a name may be before it is cut.
const (
	MaxParams    = 32
	MaxParamName = 64
)

// URL is what the ledger keeps of an untrusted URL (or a request target):
// the part before the query (scheme, authority, path) as written, cut at
// maxPrefix bytes (String); then each query parameter's name as written
// (cut at MaxParamName) and, for its value, ShortDigest of the value as
// written (percent-encoding kept); a parameter without "=" is all value.
// The first MaxParams parameters are listed; the rest are one
// "<N more, sha256:…>" entry. A fragment is replaced by its ShortDigest.
//
//	https://api.example/v1/x?key=<sha256:9f86d081884c7d65>&q=<sha256:…>
//
// Empty values stay empty ("?debug=" and "?" are kept as they are). The
// query is split where a URL parser splits it: the fragment at the first
// '#', the query at the first '?' before it.
func URL(raw string, maxPrefix int) string {
	base, frag, hasFrag := strings.Cut(raw, "#")
	prefix, query, hasQuery := strings.Cut(base, "?")
	var b strings.Builder
	b.WriteString(String(prefix, maxPrefix))
	if hasQuery {
		b.WriteByte('?')
		b.WriteString(Query(query))
	}
	if hasFrag {
		b.WriteByte('#')
		if frag != "" {
			b.WriteString(ShortDigest(frag))
		}
	}
	return b.String()
}

// Query is URL's form of a raw query (without the '?').
func Query(query string) string {
	if query == "" {
		return ""
	}
	var b strings.Builder
	rest := query
	for n := 0; ; n++ {
		if n == MaxParams {
			b.WriteString("<" + strconv.Itoa(strings.Count(rest, "&")+1) + " more, " + Digest(rest) + ">")
			break
		}
		part, next, more := strings.Cut(rest, "&")
		if name, value, ok := strings.Cut(part, "="); ok {
			b.WriteString(paramName(name))
			b.WriteByte('=')
			if value != "" {
				b.WriteString(ShortDigest(value))
			}
		} else if part != "" {
			b.WriteString(ShortDigest(part))
		}
		if !more {
			break
		}
		b.WriteByte('&')
		rest = next
	}
	return b.String()
}

// paramName keeps a parameter's name in clear unless it is too long to
// be one, then cuts it (its digest kept).
func paramName(name string) string {
	if len(name) <= MaxParamName {
		return name
	}
	keep := 16
	for keep > 0 && !utf8.RuneStart(name[keep]) {
		keep--
	}
	return name[:keep] + "…<" + strconv.Itoa(len(name)) + " bytes, " + Digest(name)[:len("sha256:")+16] + ">"
}
