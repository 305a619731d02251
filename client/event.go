package client

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/sluicehq/sluice/api"
)

// decodeEvent decodes one NDJSON event as json.Unmarshal does. An output
// event as sluiced writes it (event, stream, data, in that order, and
// nothing else), which carries most of a call's bytes, is decoded
// without reflection and in one pass over its data; any other line, or
// anything unusual in that one, goes to json.Unmarshal.
func decodeEvent(line []byte, ev *api.Event) error {
	if stream, data, ok := outputEvent(line); ok {
		*ev = api.Event{Event: api.EventOutput, Stream: stream, Data: data}
		return nil
	}
	return json.Unmarshal(line, ev)
}

var (
	outputPrefix = []byte(`{"event":"output","stream":"`)
	dataField    = []byte(`","data":"`)
)

func outputEvent(line []byte) (stream, data string, ok bool) {
	line = bytes.TrimRight(line, " \t\r\n")
	rest, ok := bytes.CutPrefix(line, outputPrefix)
	if !ok {
		return "", "", false
	}
	// A stream is stdout or stderr: letters only, no escapes.
	i := 0
	for i < len(rest) && rest[i] >= 'a' && rest[i] <= 'z' {
		i++
	}
	if i == 0 || !bytes.HasPrefix(rest[i:], dataField) {
		return "", "", false
	}
	stream = string(rest[:i])
	rest, ok = bytes.CutSuffix(rest[i+len(dataField):], []byte(`"}`))
	if !ok {
		return "", "", false
	}
	data, ok = unquote(rest)
	return stream, data, ok
}

// unquote is the string whose JSON encoding, between its quotes, is b;
// not ok for an unescaped quote or control byte, a bad escape, a
// surrogate escape or bytes that are not UTF-8 (json.Unmarshal, which
// decodes those lines instead, replaces the last two with U+FFFD).
func unquote(b []byte) (string, bool) {
	var out []byte
	start := 0
	for i := 0; i < len(b); {
		c := b[i]
		if c == '"' || c < 0x20 {
			return "", false
		}
		if c != '\\' {
			i++
			continue
		}
		if out == nil {
			out = make([]byte, 0, len(b))
		}
		out = append(out, b[start:i]...)
		if i+1 >= len(b) {
			return "", false
		}
		switch e := b[i+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if i+6 > len(b) {
				return "", false
			}
			r := rune(0)
			for _, h := range b[i+2 : i+6] {
				switch {
				case h >= '0' && h <= '9':
					h -= '0'
				case h >= 'a' && h <= 'f':
					h -= 'a' - 10
				case h >= 'A' && h <= 'F':
					h -= 'A' - 10
				default:
					return "", false
				}
				r = r<<4 | rune(h)
			}
			if r >= 0xD800 && r < 0xE000 {
				return "", false
			}
			out = utf8.AppendRune(out, r)
			i += 4
		default:
			return "", false
		}
		i += 2
		start = i
	}
	if out == nil {
		if !utf8.Valid(b) {
			return "", false
		}
		return string(b), true
	}
	out = append(out, b[start:]...)
	if !utf8.Valid(out) {
		return "", false
	}
	return string(out), true
}
