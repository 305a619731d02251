package daemon

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/jsonenc"
)

// appendCallResult appends r as encoding/json's Marshal would, byte for
// byte (HTML-escaped strings, U+2028/U+2029 escaped, invalid UTF-8 as
// U+FFFD, floats as ES6 numbers), without reflection: a read's 4 KiB
// output was 11% of the daemon's CPU under load through json.Marshal.
// ok is false for what Marshal refuses (a NaN or infinite duration): the
// caller then uses Marshal, which reports it. FuzzCallResultJSON holds it
// to Marshal's output.
func appendCallResult(b []byte, r *api.CallResult) (_ []byte, ok bool) {
	if math.IsNaN(r.DurationMS) || math.IsInf(r.DurationMS, 0) {
		return b, false
	}
	b = append(b, `{"call_id":`...)
	b = jsonenc.AppendString(b, r.CallID)
	b = append(b, `,"verdict":`...)
	b = jsonenc.AppendString(b, string(r.Verdict))
	b = append(b, `,"reason":`...)
	b = jsonenc.AppendString(b, string(r.Reason))
	b = append(b, `,"ok":`...)
	b = strconv.AppendBool(b, r.OK)
	if r.Output != nil {
		b = append(b, `,"output":`...)
		b = jsonenc.AppendString(b, *r.Output)
	}
	if r.OutputB64 != "" {
		b = append(b, `,"output_b64":`...)
		b = jsonenc.AppendString(b, r.OutputB64)
	}
	if r.Stderr != "" {
		b = append(b, `,"stderr":`...)
		b = jsonenc.AppendString(b, r.Stderr)
	}
	b = append(b, `,"truncated":`...)
	b = strconv.AppendBool(b, r.Truncated)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, r.Bytes, 10)
	if r.ExitCode != nil {
		b = append(b, `,"exit_code":`...)
		b = strconv.AppendInt(b, int64(*r.ExitCode), 10)
	}
	if r.Resource != "" {
		b = append(b, `,"resource":`...)
		b = jsonenc.AppendString(b, r.Resource)
	}
	if r.PolicyVersion != "" {
		b = append(b, `,"policy_version":`...)
		b = jsonenc.AppendString(b, r.PolicyVersion)
	}
	b = append(b, `,"duration_ms":`...)
	b = jsonenc.AppendFloat(b, r.DurationMS)
	if r.ApprovalID != "" {
		b = append(b, `,"approval_id":`...)
		b = jsonenc.AppendString(b, r.ApprovalID)
	}
	if r.SHA256 != "" {
		b = append(b, `,"sha256":`...)
		b = jsonenc.AppendString(b, r.SHA256)
	}
	if r.Durable != nil {
		b = append(b, `,"durable":`...)
		b = strconv.AppendBool(b, *r.Durable)
	}
	if r.Signal != "" {
		b = append(b, `,"signal":`...)
		b = jsonenc.AppendString(b, r.Signal)
	}
	if r.HTTPStatus != 0 {
		b = append(b, `,"http_status":`...)
		b = strconv.AppendInt(b, int64(r.HTTPStatus), 10)
	}
	if r.ContentType != "" {
		b = append(b, `,"content_type":`...)
		b = jsonenc.AppendString(b, r.ContentType)
	}
	if r.Size != nil {
		b = append(b, `,"size":`...)
		b = strconv.AppendInt(b, *r.Size, 10)
	}
	if r.NextOffset != nil {
		b = append(b, `,"next_offset":`...)
		b = strconv.AppendInt(b, *r.NextOffset, 10)
	}
	if len(r.Changes) > 0 {
		// A command's changeset: rare, and encoding/json's own.
		c, err := json.Marshal(r.Changes)
		if err != nil {
			return b, false
		}
		b = append(b, `,"changes":`...)
		b = append(b, c...)
	}
	if r.Committed != nil {
		b = append(b, `,"committed":`...)
		b = strconv.AppendBool(b, *r.Committed)
	}
	if r.Dropped != 0 {
		b = append(b, `,"dropped":`...)
		b = strconv.AppendInt(b, int64(r.Dropped), 10)
	}
	if r.Detail != "" {
		b = append(b, `,"detail":`...)
		b = jsonenc.AppendString(b, r.Detail)
	}
	if r.ApprovalNote != "" {
		b = append(b, `,"approval_note":`...)
		b = jsonenc.AppendString(b, r.ApprovalNote)
	}
	if r.Redacted != 0 {
		b = append(b, `,"redacted":`...)
		b = strconv.AppendInt(b, int64(r.Redacted), 10)
	}
	if r.Source != nil {
		b = append(b, `,"source":`...)
		b = appendSource(b, r.Source)
	}
	return append(b, '}'), true
}

// appendSource appends s as Marshal would (api.Source's fields in order).
func appendSource(b []byte, s *api.Source) []byte {
	b = append(b, `{"tool":`...)
	b = jsonenc.AppendString(b, s.Tool)
	b = append(b, `,"operation":`...)
	b = jsonenc.AppendString(b, string(s.Operation))
	if s.Resource != "" {
		b = append(b, `,"resource":`...)
		b = jsonenc.AppendString(b, s.Resource)
	}
	if s.URL != "" {
		b = append(b, `,"url":`...)
		b = jsonenc.AppendString(b, s.URL)
	}
	if s.SHA256 != "" {
		b = append(b, `,"sha256":`...)
		b = jsonenc.AppendString(b, s.SHA256)
	}
	b = append(b, `,"policy_version":`...)
	b = jsonenc.AppendString(b, s.PolicyVersion)
	b = append(b, `,"call_id":`...)
	b = jsonenc.AppendString(b, s.CallID)
	b = append(b, `,"untrusted":`...)
	b = strconv.AppendBool(b, s.Untrusted)
	return append(b, '}')
}
