//go:build linux

package daemon

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/jsonenc"
)

// opaque says whether the caller may see only that it was denied
// (deny_detail "opaque"). It is the one place that decides it; present and
// decisionEvent both ask it.
func (c *call) opaque() bool {
	return !c.dec.Allowed() && !c.dec.Pending() && c.p.m.DenyDetail == "opaque"
}

// present renders the call's result for the wire, output included.
func (c *call) present(o *outcome) api.CallResult {
	if c.opaque() {
		return api.CallResult{CallID: c.id, Verdict: api.VerdictDeny, Reason: api.ReasonUnavailable}
	}
	res := api.CallResult{
		CallID: c.id, Verdict: c.dec.WireVerdict(), Reason: c.dec.Reason,
		PolicyVersion: c.p.m.Version, DurationMS: c.elapsedMS(),
	}
	if c.dec.Resource != nil && c.dec.Resource.Path != "" && c.dec.Reason != api.ReasonOutsideRoots {
		res.Resource = c.dec.Resource.Path
	}
	if c.decoded != nil {
		res.Detail = authz.ArgsDetail(c.tool, &c.areq, c.dec)
		if res.Detail == "" {
			res.Detail = c.limitDetail // budget.go
		}
		res.ApprovalNote = c.approvalNote
	}
	if o != nil {
		res.OK, res.Reason, res.Truncated = o.ok, o.reason, o.truncated
		res.Bytes = int64(len(o.output))
		res.Redacted = o.redacted.Total()
		if o.result != nil {
			o.result.wire(&res)
		}
		if o.reason != api.ReasonAuditUnavailable && (o.ok || len(o.output) > 0 || (o.result != nil && o.result.answered())) {
			setOutput(&res, o.output)
		}
		if c.dec.Allowed() && c.decoded != nil {
			res.Source = c.source(&res, o) // source.go
		}
	}
	return res
}

// decisionEvent is the first line of a streamed call.
func (c *call) decisionEvent() api.DecisionEvent {
	ev := api.DecisionEvent{Event: api.EventDecision, CallID: c.id, Verdict: c.dec.WireVerdict(), Reason: c.dec.Reason}
	if c.opaque() {
		ev.Reason = api.ReasonUnavailable
	}
	return ev
}

// wire is what goes on the wire for res: an opaque denial shows nothing
// but that it was denied.
func (c *call) wire(res api.CallResult) any {
	if c.opaque() {
		return api.OpaqueDenial{CallID: res.CallID, Verdict: res.Verdict, Reason: res.Reason}
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

// emitter is how a call's events leave the daemon: collected into one
// JSON response, or written as NDJSON as they happen.
type emitter interface {
	streams() bool
	decision(ev api.DecisionEvent)
	output(stream string, data []byte)
	result(res api.CallResult)
}

// bufferedEmitter sends one JSON body: the result, output included.
type bufferedEmitter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	c       *call
}

func (e *bufferedEmitter) streams() bool                  { return false }
func (e *bufferedEmitter) decision(api.DecisionEvent)     {}
func (e *bufferedEmitter) output(stream string, b []byte) {}
func (e *bufferedEmitter) result(res api.CallResult) {
	// The bound on writing starts once the call has run: a command may
	// rightly take up to its timeout_ms before there is anything to write.
	_ = e.rc.SetWriteDeadline(time.Now().Add(e.timeout))
	writeJSON(e.w, http.StatusOK, e.c.wire(res))
	// Out now, not when the handler returns: what follows the reply (an
	// execute call's box released, see call.held) is not the caller's wait.
	_ = e.rc.Flush()
}

// streamEmitter writes application/x-ndjson, one event per line.
//
// Events that need not reach the caller at once (see live) are collected
// in buf; a call none of whose events was live sends them all at its end
// as one body with a Content-Length, in one write with its header where
// it fits: no chunk framing, and no last chunk written after the handler
// returns, for the caller to wait on. Once an event is live the response
// is chunked and each event is written as it comes, buf first.
type streamEmitter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	c       *call
	buf     []byte // events not yet written
	started bool   // the header is written: events go out as they come
}

func (e *streamEmitter) streams() bool { return true }

// send appends v's line to buf.
func (e *streamEmitter) send(v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	e.buf = append(e.buf, buf.Bytes()...)
}

// flush writes buf now, the header first (chunked) if it is not yet out.
func (e *streamEmitter) flush() {
	if !e.started {
		e.started = true
		e.w.Header().Set("Content-Type", "application/x-ndjson")
		e.w.WriteHeader(http.StatusOK)
	}
	_ = e.rc.SetWriteDeadline(time.Now().Add(e.timeout))
	if len(e.buf) > 0 {
		_, _ = e.w.Write(e.buf)
		e.buf = e.buf[:0]
	}
	_ = e.rc.Flush()
}

// end writes the last event and everything before it that is not yet out.
func (e *streamEmitter) end() {
	if e.started {
		e.flush()
		return
	}
	h := e.w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Content-Length", strconv.Itoa(len(e.buf)))
	e.started = true
	_ = e.rc.SetWriteDeadline(time.Now().Add(e.timeout))
	e.w.WriteHeader(http.StatusOK)
	_, _ = e.w.Write(e.buf)
	e.buf = nil
	_ = e.rc.Flush()
}

// live says whether an event must reach the caller at once: a pending
// decision (the caller waits for a human), and a command's decision and
// output, which stream while it runs. Every other call's events are sent
// back to back at its end, in one response body with its result.
func (e *streamEmitter) live(ev api.DecisionEvent) bool {
	return ev.Verdict == api.VerdictPending || e.streaming()
}

func (e *streamEmitter) streaming() bool {
	return e.c != nil && e.c.decoded != nil && e.c.op != nil && e.c.op.Streams
}

func (e *streamEmitter) decision(ev api.DecisionEvent) {
	e.send(ev)
	if e.live(ev) {
		e.flush()
	}
}

func (e *streamEmitter) output(stream string, data []byte) {
	if utf8.Valid(data) {
		// An OutputEvent without reflection; its strings as Marshal
		// writes them (HTML-escaped, as a buffered result's output is),
		// which `sluice mcp` can put in its own message as they are.
		e.buf = append(e.buf, `{"event":"output","stream":`...)
		e.buf = jsonenc.AppendString(e.buf, stream)
		if len(data) > 0 {
			e.buf = append(e.buf, `,"data":`...)
			e.buf = jsonenc.AppendString(e.buf, string(data))
		}
		e.buf = append(e.buf, "}\n"...)
	} else {
		e.send(api.OutputEvent{Event: api.EventOutput, Stream: stream, DataB64: base64.StdEncoding.EncodeToString(data)})
	}
	if e.streaming() {
		e.flush()
	}
}

func (e *streamEmitter) result(res api.CallResult) {
	if e.c.opaque() {
		// Not a ResultEvent: its CallResult would add ok, truncated,
		// bytes and duration_ms to what an opaque denial shows.
		e.send(struct {
			Event string `json:"event"`
			api.OpaqueDenial
		}{api.EventResult, api.OpaqueDenial{CallID: res.CallID, Verdict: res.Verdict, Reason: res.Reason}})
		e.end()
		return
	}
	res.Output, res.OutputB64 = nil, ""
	if b, ok := appendCallResult(make([]byte, 0, 768+len(res.Stderr)), &res); ok {
		// A ResultEvent as Marshal writes it (wirejson.go), without
		// reflection: the event's field, then the result's.
		e.buf = append(e.buf, `{"event":"result",`...)
		e.buf = append(e.buf, b[1:]...)
		e.buf = append(e.buf, '\n')
	} else {
		e.send(api.ResultEvent{Event: api.EventResult, CallResult: res})
	}
	e.end()
}
