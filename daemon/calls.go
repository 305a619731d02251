package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/strictjson"
)

const (
	maxToolName   = 128
	maxTaskID     = 128
	maxArgsRecord = 8 << 10 // larger args are recorded by digest
)

// badRequest is an error the caller caused and is told about (400).
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, a ...any) error { return &badRequest{fmt.Sprintf(format, a...)} }

// call is one request on its way through the pipeline.
type call struct {
	d     *Daemon
	p     *policy
	ctx   context.Context // the request's: done when the client goes away
	peer  Peer
	start time.Time
	id    string

	req        api.CallRequest
	tool       *authz.Tool // nil for an unknown tool
	areq       authz.Request
	argsRecord json.RawMessage
	handles    map[int]*securefs.Handle // by root index, for resolved paths
	dec        authz.Decision
}

func (d *Daemon) handleCall(w http.ResponseWriter, r *http.Request, peer Peer) {
	start := time.Now()
	body, status, err := readBody(w, r, d.cfg.MaxBodyBytes)
	if err != nil {
		code := api.ErrBadRequest
		if status == http.StatusRequestEntityTooLarge {
			code = api.ErrTooLarge
		}
		writeError(w, status, code, err.Error())
		return
	}
	// The body is in: lift the read deadline so that net/http's background
	// read cannot cancel a long call, and bound the time to write instead.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})

	p := d.acquire()
	defer p.release()
	c := &call{d: d, p: p, ctx: r.Context(), peer: peer, start: start, handles: map[int]*securefs.Handle{}}
	defer c.closeHandles()
	if err := c.parse(body); err != nil {
		writeError(w, http.StatusBadRequest, api.ErrBadRequest, err.Error())
		return
	}
	c.areq.Principal, _ = p.m.Identify(peer.UID, peer.GID)
	c.resolve()
	c.dec = authz.Decide(p.m, &c.areq)
	if c.dec.Pending {
		// This build has no approval queue to park the call in: a call
		// that needs a human is denied, never run unapproved.
		c.dec.Pending = false
	}
	c.id = newCallID()

	if c.req.Stream {
		c.runStream(w, rc)
		return
	}
	res := c.run()
	// The bound on writing starts once the call has run: a command may
	// rightly take up to its timeout_ms before there is anything to write.
	_ = rc.SetWriteDeadline(time.Now().Add(c.d.cfg.WriteTimeout))
	writeJSON(w, http.StatusOK, c.present(res))
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
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var ke *strictjson.KeyError
	switch {
	case errors.As(err, &ke):
		if where != "" {
			return badf("%s.%s", where, ke.Error())
		}
		return badf("%s", ke.Error())
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = where
		} else if where != "" {
			field = where + "." + field
		}
		return badf("%s: expected %s, got JSON %s", field, te.Type, te.Value)
	case errors.As(err, &se):
		return badf("malformed JSON at byte %d: %v", se.Offset, err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.TrimPrefix(err.Error(), "json: unknown field ")
		if where != "" {
			return badf("%s: unknown field %s", where, f)
		}
		return badf("unknown field %s", f)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return badf("malformed JSON: unexpected end of input")
	}
	return badf("malformed JSON: %v", err)
}

// parse is DESIGN §1 step 1: the envelope strictly, then the args against
// the tool's operation. Type errors and unknown fields are 400s; args of
// the right types that break a rule (a missing path) become invalid_args.
func (c *call) parse(body []byte) error {
	var raw struct {
		Tool   *string         `json:"tool"`
		Args   json.RawMessage `json:"args"`
		Task   *string         `json:"task"`
		Stream *bool           `json:"stream"`
	}
	if err := strictDecode(body, &raw); err != nil {
		return describeJSONError("", err)
	}
	if raw.Tool == nil || *raw.Tool == "" {
		return badf("tool: required")
	}
	if len(*raw.Tool) > maxToolName {
		return badf("tool: longer than %d bytes", maxToolName)
	}
	c.req.Tool, c.req.Args = *raw.Tool, raw.Args
	if raw.Task != nil {
		if len(*raw.Task) > maxTaskID || strings.ContainsFunc(*raw.Task, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return badf("task: at most %d bytes, no control characters", maxTaskID)
		}
		c.req.Task = *raw.Task
	}
	c.req.Stream = raw.Stream != nil && *raw.Stream
	c.areq.Tool = c.req.Tool

	args := raw.Args
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	t, ok := c.p.m.Tools[c.req.Tool]
	if !ok {
		// No schema to check against: the decision is unknown_tool. Record
		// what was asked, by digest when it is large.
		c.argsRecord = recordArgs(args)
		return nil
	}
	c.tool = t
	switch t.Operation {
	case api.OpRead, api.OpList:
		var a api.PathArgs
		if err := strictDecode(args, &a); err != nil {
			return describeJSONError("args", err)
		}
		c.areq.Path = a.Path
		if a.Path == nil {
			c.areq.ArgsError = "args.path: required"
		}
		c.argsRecord = recordArgs(mustJSON(a))
	case api.OpWrite:
		var a api.WriteArgs
		if err := strictDecode(args, &a); err != nil {
			return describeJSONError("args", err)
		}
		c.areq.Path = a.Path
		c.areq.ArgsError = checkWriteArgs(&a)
		c.argsRecord = recordWriteArgs(&a)
	case api.OpExecute:
		var a api.ExecArgs
		if err := strictDecode(args, &a); err != nil {
			return describeJSONError("args", err)
		}
		c.areq.Argv = a.Argv
		c.argsRecord = recordArgs(mustJSON(a))
	}
	return nil
}

func checkWriteArgs(a *api.WriteArgs) string {
	switch {
	case a.Path == nil:
		return "args.path: required"
	case a.Content != nil && a.ContentB64 != nil:
		return "args: give content or content_b64, not both"
	case a.Content == nil && a.ContentB64 == nil:
		return "args.content: required (or content_b64)"
	case a.IfMatch != "" && a.IfMatch != "absent" && !isSHA256(a.IfMatch):
		return `args.if_match: "sha256:<64 hex>" or "absent"`
	}
	if a.ContentB64 != nil {
		if _, err := base64.StdEncoding.DecodeString(*a.ContentB64); err != nil {
			return "args.content_b64: not valid base64"
		}
	}
	return ""
}

func isSHA256(s string) bool {
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain structs come here
	}
	return b
}

// recordArgs returns args for the ledger: as given (compacted) when small,
// else by digest, so one call cannot bloat the ledger.
func recordArgs(args []byte) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, args); err == nil && buf.Len() <= maxArgsRecord {
		return buf.Bytes()
	}
	sum := sha256.Sum256(args)
	return mustJSON(map[string]any{"elided": true, "sha256": "sha256:" + hex.EncodeToString(sum[:]), "bytes": len(args)})
}

// recordWriteArgs keeps no file body in the ledger: only its digest and length.
func recordWriteArgs(a *api.WriteArgs) json.RawMessage {
	var content []byte
	if a.Content != nil {
		content = []byte(*a.Content)
	} else if a.ContentB64 != nil {
		content, _ = base64.StdEncoding.DecodeString(*a.ContentB64)
	}
	sum := sha256.Sum256(content)
	rec := map[string]any{"content_sha256": "sha256:" + hex.EncodeToString(sum[:]), "content_len": len(content)}
	if a.Path != nil {
		rec["path"] = *a.Path
	}
	if a.IfMatch != "" {
		rec["if_match"] = a.IfMatch
	}
	return recordArgs(mustJSON(rec))
}

// resolve is DESIGN §1 step 3. It runs only for a call that could be
// allowed: the tool exists, the principal may call it, the args are sound
// and the path passes the lexical checks; then the path is resolved by the
// kernel beneath each root it lies under.
func (c *call) resolve() {
	t := c.tool
	if t == nil || c.areq.Path == nil || c.areq.ArgsError != "" ||
		!c.p.m.MayCall(c.areq.Principal, c.req.Tool) || authz.CheckPath(*c.areq.Path) != "" {
		return
	}
	matches := authz.MatchRoots(t, *c.areq.Path)
	for _, m := range matches {
		if authz.NeverMatch(t, m.Rel) {
			return // denied as requested; the kernel is not asked
		}
	}
	switch t.Operation {
	case api.OpRead, api.OpList, api.OpWrite:
	default:
		return
	}
	roots := c.p.roots[c.req.Tool]
	for _, m := range matches {
		res := authz.Resource{Root: m.Index}
		root := roots[m.Index]
		if root == nil {
			res.Outcome = authz.OutcomeNotFound
			c.areq.Resolved = append(c.areq.Resolved, res)
			continue
		}
		h, err := root.Resolve(m.Rel)
		switch {
		case err == nil:
			res.Outcome, res.Kind = authz.OutcomeOK, h.Kind
			if err := relBeneath(root, h, &res); err != nil {
				c.d.log.Error("resolved fd not where expected; denying", "err", err, "call_tool", c.req.Tool)
				res.Outcome = authz.OutcomeError
				h.Close()
				break
			}
			c.handles[m.Index] = h
		case errors.Is(err, securefs.ErrPathEscapes):
			res.Outcome = authz.OutcomeEscapes
		case errors.Is(err, securefs.ErrNotExist):
			res.Outcome = authz.OutcomeNotFound
		case errors.Is(err, securefs.ErrInvalidPath):
			res.Outcome = authz.OutcomeInvalid
		default:
			c.d.log.Error("resolve failed", "err", err, "tool", c.req.Tool)
			res.Outcome = authz.OutcomeError
		}
		c.areq.Resolved = append(c.areq.Resolved, res)
	}
}

// relBeneath fills the resource's absolute path and its path relative to
// the root, both as the kernel names the fds now.
func relBeneath(root *securefs.Root, h *securefs.Handle, res *authz.Resource) error {
	if h.File() == nil {
		return nil // fallback resolver: a socket it could not open has no fd to name
	}
	abs, rel, err := root.Locate(h)
	if err != nil {
		return err
	}
	res.Path, res.Rel = abs, rel
	return nil
}

func (c *call) closeHandles() {
	for _, h := range c.handles {
		h.Close()
	}
}

// outcome is what executing an allowed call produced.
type outcome struct {
	ok        bool
	reason    string
	output    []byte
	stderr    []byte
	truncated bool
	exitCode  *int
}

func (c *call) principalRecord() *audit.Principal {
	return &audit.Principal{Name: c.areq.Principal, UID: c.peer.UID, GID: c.peer.GID, PID: c.peer.PID}
}

// auditDecision appends the decision record (not yet synced). A call whose
// decision cannot be written is denied: audit_unavailable.
func (c *call) auditDecision() (uint64, error) {
	rec := &audit.Record{
		Kind: audit.KindDecision, CallID: c.id, Principal: c.principalRecord(), Task: c.req.Task,
		Tool: c.req.Tool, Args: c.argsRecord, Verdict: c.dec.Verdict(), Reason: c.dec.Reason,
		Rule: c.dec.Rule, PolicyVersion: c.p.m.Version,
	}
	if c.tool != nil {
		rec.Operation = c.tool.Operation
	}
	if c.dec.Resource != nil {
		rec.Resource = c.dec.Resource.Path
	}
	if len(c.areq.Resolved) > 0 {
		rec.Resolved = mustJSON(c.areq.Resolved)
	}
	seq, err := c.d.ledger.Append(rec)
	if err != nil {
		c.d.log.Error("audit decision failed; denying", "err", err, "call_id", c.id)
	}
	return seq, err
}

func (c *call) auditResult(o *outcome) (uint64, error) {
	rec := &audit.Record{
		Kind: audit.KindResult, CallID: c.id, Principal: c.principalRecord(), Task: c.req.Task,
		Tool: c.req.Tool, Verdict: c.dec.Verdict(), Reason: o.reason, PolicyVersion: c.p.m.Version,
		Result: &audit.Result{OK: o.ok, Bytes: int64(len(o.output)), Truncated: o.truncated,
			DurationMS: c.elapsedMS(), ExitCode: o.exitCode},
	}
	if c.dec.Resource != nil {
		rec.Resource = c.dec.Resource.Path
	}
	seq, err := c.d.ledger.Append(rec)
	if err != nil {
		c.d.log.Error("audit result failed; withholding output", "err", err, "call_id", c.id)
	}
	return seq, err
}

func (c *call) elapsedMS() float64 {
	ms := float64(time.Since(c.start).Nanoseconds()) / 1e6
	return math.Round(ms*1000) / 1000
}

func (c *call) failClosed() {
	c.dec = authz.Decision{Reason: api.ReasonAuditUnavailable}
}

// run is the non-streaming pipeline from the audit on: decision appended,
// call executed, result appended, both made durable by one fdatasync,
// then the result may leave.
func (c *call) run() *outcome {
	seq, err := c.auditDecision()
	if err != nil {
		c.failClosed()
		return nil
	}
	if !c.dec.Allow {
		if err := c.d.ledger.Sync(seq); err != nil {
			c.failClosed()
		}
		return nil
	}
	o := c.execute(nil)
	rseq, err := c.auditResult(o)
	if err != nil {
		// The decision is durable or nothing is; the output stays here.
		_ = c.d.ledger.Sync(seq)
		return &outcome{reason: api.ReasonAuditUnavailable}
	}
	if err := c.d.ledger.Sync(rseq); err != nil {
		return &outcome{reason: api.ReasonAuditUnavailable}
	}
	return o
}

// present renders the wire result. A denial under deny_detail "opaque"
// shows only that it was denied.
func (c *call) present(o *outcome) any {
	if !c.dec.Allow && c.p.m.DenyDetail == "opaque" {
		return api.OpaqueDenial{CallID: c.id, Verdict: api.VerdictDeny, Reason: api.ReasonUnavailable}
	}
	res := api.CallResult{
		CallID: c.id, Verdict: api.VerdictDeny, Reason: c.dec.Reason,
		PolicyVersion: c.p.m.Version, DurationMS: c.elapsedMS(),
	}
	if c.dec.Allow {
		res.Verdict = api.VerdictAllow
	}
	if c.dec.Resource != nil && c.dec.Resource.Path != "" && c.dec.Reason != api.ReasonOutsideRoots {
		res.Resource = c.dec.Resource.Path
	}
	if o != nil {
		res.OK, res.Reason, res.Truncated, res.ExitCode = o.ok, o.reason, o.truncated, o.exitCode
		res.Bytes = int64(len(o.output))
		if o.reason != api.ReasonAuditUnavailable && (o.ok || len(o.output) > 0 || o.exitCode != nil) {
			setOutput(&res, o.output)
			res.Stderr = validStderr(o.stderr)
		}
	}
	return res
}

func setOutput(res *api.CallResult, b []byte) {
	if utf8.Valid(b) {
		s := string(b)
		res.Output = &s
		return
	}
	res.OutputB64 = base64.StdEncoding.EncodeToString(b)
}

// execute runs an allowed call on what was resolved for it. onChunk, when
// set, gets output as it arrives (streaming).
func (c *call) execute(onChunk func(stream string, data []byte)) *outcome {
	switch c.tool.Operation {
	case api.OpRead, api.OpList:
		h := c.handles[c.dec.Resource.Root]
		if h == nil {
			return &outcome{reason: api.ReasonInternalError}
		}
		max := c.tool.EffectiveMaxBytes()
		var data []byte
		var trunc bool
		var err error
		if c.tool.Operation == api.OpRead {
			data, trunc, err = readCapped(h, max)
		} else {
			data, trunc, err = listDir(h, c.tool, c.dec.Resource.Rel, max)
		}
		if err != nil {
			c.d.log.Error("file tool failed", "err", err, "call_id", c.id)
			return &outcome{reason: api.ReasonInternalError}
		}
		if onChunk != nil && len(data) > 0 {
			onChunk("stdout", data)
		}
		return &outcome{ok: true, reason: api.ReasonAllowed, output: data, truncated: trunc}
	case api.OpExecute:
		return c.runExec(onChunk)
	}
	c.d.log.Error("operation has no executor in this build", "operation", c.tool.Operation, "tool", c.req.Tool)
	return &outcome{reason: api.ReasonInternalError}
}

// runStream is the NDJSON form: the decision is made durable and sent
// first, output follows, the result last.
func (c *call) runStream(w http.ResponseWriter, rc *http.ResponseController) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	send := func(v any) {
		_ = rc.SetWriteDeadline(time.Now().Add(c.d.cfg.WriteTimeout))
		_ = enc.Encode(v)
		_ = rc.Flush()
	}
	seq, err := c.auditDecision()
	if err == nil {
		err = c.d.ledger.Sync(seq)
	}
	if err != nil {
		c.failClosed()
	}
	decision := api.DecisionEvent{Event: api.EventDecision, CallID: c.id, Verdict: c.dec.Verdict(), Reason: c.dec.Reason}
	if !c.dec.Allow {
		if c.p.m.DenyDetail == "opaque" {
			decision.Reason = api.ReasonUnavailable
			send(decision)
			send(api.ResultEvent{Event: api.EventResult, CallResult: api.CallResult{CallID: c.id, Verdict: api.VerdictDeny, Reason: api.ReasonUnavailable}})
			return
		}
		send(decision)
		res := c.present(nil).(api.CallResult)
		send(api.ResultEvent{Event: api.EventResult, CallResult: res})
		return
	}
	send(decision)
	o := c.execute(func(stream string, data []byte) {
		ev := api.OutputEvent{Event: api.EventOutput, Stream: stream}
		if utf8.Valid(data) {
			ev.Data = string(data)
		} else {
			ev.DataB64 = base64.StdEncoding.EncodeToString(data)
		}
		send(ev)
	})
	if rseq, err := c.auditResult(o); err != nil || c.d.ledger.Sync(rseq) != nil {
		o = &outcome{reason: api.ReasonAuditUnavailable, output: o.output}
	}
	res := c.present(o).(api.CallResult)
	res.Output, res.OutputB64 = nil, ""
	send(api.ResultEvent{Event: api.EventResult, CallResult: res})
}
