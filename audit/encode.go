package audit

import (
	"encoding/json"
	"sort"
	"strconv"

	"github.com/sluicehq/sluice/internal/jsonenc"
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
		b = jsonenc.AppendString(b, v)
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
	if len(rec.Changes) > 0 {
		// Changesets only: encoding/json, as egress below.
		c, err := json.Marshal(rec.Changes)
		if err == nil {
			raw("changes", c)
		}
	}
	str("detail", rec.Detail, true)
	if rec.Egress != nil {
		// Rare (network calls only): encoding/json, which the rest of
		// this function matches by hand.
		e, err := json.Marshal(rec.Egress)
		if err == nil {
			raw("egress", e)
		}
	}
	str("grant", rec.Grant, true)
	str("kind", rec.Kind, false)
	str("operation", string(rec.Operation), true)
	str("policy_version", rec.PolicyVersion, true)
	str("prev", rec.Prev, false)
	if p := rec.Principal; p != nil {
		key("principal")
		b = append(b, '{')
		if p.Cgroup != "" {
			b = append(b, `"cgroup":`...)
			b = jsonenc.AppendString(b, p.Cgroup)
			b = append(b, ',')
		}
		b = append(b, `"gid":`...)
		b = strconv.AppendUint(b, uint64(p.GID), 10)
		b = append(b, `,"name":`...)
		b = jsonenc.AppendString(b, p.Name)
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
		b = jsonenc.AppendFloat(b, r.DurationMS)
		if r.ExitCode != nil {
			b = append(b, `,"exit_code":`...)
			b = strconv.AppendInt(b, int64(*r.ExitCode), 10)
		}
		b = append(b, `,"ok":`...)
		b = strconv.AppendBool(b, r.OK)
		if len(r.Redacted) > 0 {
			b = appendCounts(append(b, `,"redacted":`...), r.Redacted)
		}
		if r.SHA256 != "" {
			b = append(b, `,"sha256":`...)
			b = jsonenc.AppendString(b, r.SHA256)
		}
		if r.Signal != "" {
			b = append(b, `,"signal":`...)
			b = jsonenc.AppendString(b, r.Signal)
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
	if t := rec.Token; t != nil {
		key("token")
		b = append(b, `{"id":`...)
		b = jsonenc.AppendString(b, t.ID)
		b = append(b, `,"minter":`...)
		b = jsonenc.AppendString(b, t.Minter)
		if t.Subject != "" {
			b = append(b, `,"subject":`...)
			b = jsonenc.AppendString(b, t.Subject)
		}
		b = append(b, '}')
	}
	str("tool", rec.Tool, true)
	str("verdict", string(rec.Verdict), true)
	return b
}

// appendCounts writes counts as encoding/json does: keys sorted.
func appendCounts(b []byte, counts map[string]int) []byte {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendString(b, k)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(counts[k]), 10)
	}
	return append(b, '}')
}
