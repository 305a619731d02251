//go:build linux

package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/strictjson"
)

const (
	maxToolName = 128
	maxTaskID   = 128
)

// badRequest is an error the caller caused and is told about (400).
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, a ...any) error { return &badRequest{fmt.Sprintf(format, a...)} }

// decoded is a request after docs/design.md §1 step 1: the envelope and the args,
// decoded strictly against the tool's operation. Nothing here touched the
// filesystem or the clock: decodeCall is pure, so replay decodes a
// recorded request exactly as the daemon did.
type decoded struct {
	body []byte // as received: an approved call is decoded again from it
	req  api.CallRequest
	tool *authz.Tool // nil for an unknown tool
	op   *opSpec     // nil for an unknown tool
	// areq is what Decide sees: the operation's typed args (areq.Args,
	// which its executor reads too) and what its targets resolved to.
	areq       authz.Request
	argsRecord json.RawMessage

	// args are the args as the operation decoded them: what an approver
	// is shown of the call, and what an approval binds (args.Bound).
	args authz.Args

	// approvalNote is the note of the approver who decided the call
	// (approvals.go), for its result (api.CallResult.ApprovalNote).
	approvalNote string
	// grantID is the grant that let the call run without waiting for
	// approval (approvals_scale.go); its decision record names it.
	grantID string
}

// decodeCall parses a /v1/calls body under manifest m. Type errors and
// unknown fields are 400s; args of the right types that break a rule (a
// missing path) become areq.ArgsError, decided as invalid_args.
func decodeCall(m *authz.Manifest, body []byte) (*decoded, error) {
	var raw struct {
		Tool   *string         `json:"tool"`
		Args   json.RawMessage `json:"args"`
		Task   *string         `json:"task"`
		Stream *bool           `json:"stream"`
	}
	if err := strictDecode(body, &raw); err != nil {
		return nil, describeJSONError("", err)
	}
	if raw.Tool == nil || *raw.Tool == "" {
		return nil, badf("tool: required")
	}
	if len(*raw.Tool) > maxToolName {
		return nil, badf("tool: longer than %d bytes", maxToolName)
	}
	dc := &decoded{body: body}
	dc.req.Tool, dc.req.Args = *raw.Tool, raw.Args
	if raw.Task != nil {
		if len(*raw.Task) > maxTaskID || strings.ContainsFunc(*raw.Task, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, badf("task: at most %d bytes, no control characters", maxTaskID)
		}
		dc.req.Task = *raw.Task
	}
	dc.req.Stream = raw.Stream != nil && *raw.Stream
	dc.areq.Tool = dc.req.Tool

	args := raw.Args
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	t, ok := m.Tools[dc.req.Tool]
	if !ok {
		// No schema to check against: the decision is unknown_tool. Record
		// what was asked, by digest when it is large.
		dc.argsRecord = authz.RecordArgs(args)
		return dc, nil
	}
	dc.tool = t
	dc.op = operations[t.Operation]
	if dc.op == nil {
		dc.argsRecord = authz.RecordArgs(args)
		return dc, nil // authz denies an operation it does not know
	}
	a, err := dc.op.DecodeArgs(t, args)
	if err != nil {
		return nil, badf("%s", err)
	}
	dc.areq = a.Request("", dc.req.Tool)
	dc.argsRecord = a.Record
	dc.args = a
	return dc, nil
}

func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, int, error) {
	if r.ContentLength > limit {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("body of %d bytes exceeds the limit of %d", r.ContentLength, limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("body exceeds the limit of %d bytes", limit)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("read body: %v", err)
	}
	return body, 0, nil
}

// strictDecode decodes exactly one JSON value into v: no unknown fields,
// no trailing data, keys exact (case-sensitive) and not repeated.
func strictDecode(data []byte, v any) error { return strictjson.Decode(data, v) }

func describeJSONError(where string, err error) error {
	return badf("%s", strictjson.Describe(where, err))
}

func sha256Of(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain structs come here
	}
	return b
}
