package audit

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// appendRecord appends rec's JSON without the hash member and without the
// closing brace. It is encoding/json's output for Record, written by hand:
// two records go into the ledger on every call, and reflection was a tenth
// of a call's CPU. TestEncodeMatchesEncodingJSON holds the two equal.
func appendRecord(b []byte, rec *Record) []byte {
	b = append(b, '{')
	first := true
	key := func(k string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
	}
	str := func(k, v string, omitEmpty bool) {
		if omitEmpty && v == "" {
			return
		}
		key(k)
		b = appendString(b, v)
	}
	raw := func(k string, v json.RawMessage) {
		if len(v) == 0 {
			return
		}
		key(k)
		b = append(b, v...)
	}
	str("approval_id", rec.ApprovalID, true)
	raw("args", rec.Args)
	str("call_id", rec.CallID, true)
	str("detail", rec.Detail, true)
	if rec.Egress != nil {
		// Rare (network calls only): encoding/json, which the rest of
		// this function matches by hand.
		e, err := json.Marshal(rec.Egress)
		if err == nil {
			raw("egress", e)
		}
	}
	str("kind", rec.Kind, false)
	str("operation", string(rec.Operation), true)
	str("policy_version", rec.PolicyVersion, true)
	str("prev", rec.Prev, false)
	if p := rec.Principal; p != nil {
		key("principal")
		b = append(b, `{"gid":`...)
		b = strconv.AppendUint(b, uint64(p.GID), 10)
		b = append(b, `,"name":`...)
		b = appendString(b, p.Name)
		b = append(b, `,"pid":`...)
		b = strconv.AppendInt(b, int64(p.PID), 10)
		b = append(b, `,"uid":`...)
		b = strconv.AppendUint(b, uint64(p.UID), 10)
		b = append(b, '}')
	}
	str("reason", string(rec.Reason), true)
	raw("resolved", rec.Resolved)
	str("resource", rec.Resource, true)
	if r := rec.Result; r != nil {
		key("result")
		b = append(b, `{"bytes":`...)
		b = strconv.AppendInt(b, r.Bytes, 10)
		if r.Durable != nil {
			b = append(b, `,"durable":`...)
			b = strconv.AppendBool(b, *r.Durable)
		}
		b = append(b, `,"duration_ms":`...)
		b = appendFloat(b, r.DurationMS)
		if r.ExitCode != nil {
			b = append(b, `,"exit_code":`...)
			b = strconv.AppendInt(b, int64(*r.ExitCode), 10)
		}
		b = append(b, `,"ok":`...)
		b = strconv.AppendBool(b, r.OK)
		if r.SHA256 != "" {
			b = append(b, `,"sha256":`...)
			b = appendString(b, r.SHA256)
		}
		if r.Signal != "" {
			b = append(b, `,"signal":`...)
			b = appendString(b, r.Signal)
		}
		if r.Size != 0 {
			b = append(b, `,"size":`...)
			b = strconv.AppendInt(b, r.Size, 10)
		}
		b = append(b, `,"truncated":`...)
		b = strconv.AppendBool(b, r.Truncated)
		b = append(b, '}')
	}
	str("rule", rec.Rule, true)
	key("seq")
	b = strconv.AppendUint(b, rec.Seq, 10)
	str("task", rec.Task, true)
	str("time", rec.Time, false)
	str("tool", rec.Tool, true)
	str("verdict", string(rec.Verdict), true)
	return b
}

// appendFloat formats like encoding/json does for float64.
func appendFloat(b []byte, f float64) []byte {
	abs := f
	if abs < 0 {
		abs = -abs
	}
	fmtc := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		fmtc = 'e'
	}
	b = strconv.AppendFloat(b, f, fmtc, -1, 64)
	if fmtc == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendString quotes s as encoding/json does with HTML escaping on:
// control characters, '<', '>', '&', U+2028 and U+2029 escaped, invalid
// UTF-8 replaced by U+FFFD. One record is always one line.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
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
			i += size
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
