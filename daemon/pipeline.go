//go:build linux

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/secretscan"
	"github.com/sluicehq/sluice/sandbox"
)

// call is one request on its way through the pipeline. It is owned by the
// daemon (see registry), not by its HTTP handler: approvals, task cancels
// and shutdown find it by id or task and end it with their own cause.
type call struct {
	*decoded
	d     *Daemon
	p     *policy
	ctx   context.Context // ends with a cause: errClientGone, errCallCancelled, errTaskCancelled, errShutdown
	stop  context.CancelCauseFunc
	peer  Peer
	start time.Time
	id    string
	// owner is the principal the peer mapped to when the call began: only
	// it (or an approver) may cancel the call by id.
	owner string
	task  taskKey // (principal, task id) when the call names a task
	gen   uint64  // the task's generation when the call was decided
	// approvalID is set once the call waited for a human; its decision
	// records carry it.
	approvalID string
	// tok is the delegation token the call presented (tokens.go), nil for
	// none; tokenID() is its id, what per-token limits key on.
	tok *tokenUse

	// answered is set just before the result is sent: from then on the
	// call has ended for a cancel by id (404), though its handler has
	// still to return and unregister it.
	answered atomic.Bool

	// held is an execute call's box once its command has ended: released
	// (destroyed in the background, its pool refilled) after the reply.
	held *sandbox.Box
	// scratch is an execute call's scratch layer once its command has
	// ended, and ranAt when the command was handed over (exec_changeset.go).
	scratch *sandbox.Scratch
	ranAt   time.Time
	// prepared, when set, is what the operation's prepare began while the
	// decision was made durable (execute: a box being made, for which the
	// call holds a container slot); the executor takes it.
	prepared preparedWork

	// targets is what each of the operation's targets resolved to
	// (authz.Op.Targets, in order), held for its executor.
	targets []heldTarget
	dec     authz.Decision
	// limitDetail says when a call refused by its principal's budgets
	// frees up, or that this denial spent the budget (budget.go).
	limitDetail string
}

// preparedWork is what an operation's prepare (opSpec.prepare) began for
// one call and its executor takes; drop gives back, unused, what a call
// that ended first left.
type preparedWork interface{ drop(c *call) }

// Causes a call's context ends with; each becomes its reason.
var (
	errClientGone    = errors.New("the client went away")
	errCallCancelled = errors.New("the call was cancelled")
	errTaskCancelled = errors.New("the call's task was cancelled")
	errShutdown      = errors.New("sluiced is shutting down")
)

// cancelError is the cause of a call cancelled by id; it names who
// cancelled it, for the result record.
type cancelError struct{ by string }

func (e *cancelError) Error() string        { return "cancelled by " + e.by }
func (e *cancelError) Is(target error) bool { return target == errCallCancelled }

// endReason maps why a call's context ended to its stable reason.
func (c *call) endReason() api.Reason {
	cause := context.Cause(c.ctx)
	if errors.Is(cause, errCallCancelled) {
		return api.ReasonCancelled
	}
	switch cause {
	case errTaskCancelled:
		return api.ReasonTaskCancelled
	case errShutdown:
		return api.ReasonShutdown
	case errClientGone: // nobody to tell, but the ledger says so
		return api.ReasonCancelled
	case errAuditLost:
		return api.ReasonAuditUnavailable
	}
	return api.ReasonInternalError
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
	dc, err := decodeCall(p.m, body)
	if err != nil {
		p.release()
		writeError(w, http.StatusBadRequest, api.ErrBadRequest, err.Error())
		return
	}
	tu := d.useToken(r.Header.Get("Authorization"), peer)
	tu.pinTask(dc)
	c := d.calls.begin(d, p, peer, dc, start, tu)
	defer func() {
		c.releaseHeld() // on every path; after a reply it is done already
		// What prepare began for a call that ended before it ran.
		if c.prepared != nil {
			c.prepared.drop(c)
		}
		d.calls.end(c)
		if c.p != nil { // a parked call gives its policy back while it waits
			c.p.release()
		}
	}()
	// The handler only attaches: a client that goes away ends the call
	// with that cause, as a cancel or shutdown would with theirs.
	detach := context.AfterFunc(r.Context(), func() { c.stop(errClientGone) })
	defer detach()
	var em emitter = &bufferedEmitter{w: w, rc: rc, timeout: d.cfg.WriteTimeout, c: c}
	if dc.req.Stream {
		em = &streamEmitter{w: w, rc: rc, timeout: d.cfg.WriteTimeout, c: c}
	}
	c.pipeline(em)
}

// pipeline is docs/design.md §1 steps 2-9 for buffered and streamed calls alike.
//
// Durability (docs/design.md §3): the decision is appended before
// anything runs. For a call with effects (a write, delete, fetch or post,
// a command with egress: authz.Op.EffectsOf) it is made durable before
// the effect starts. An effect-free call runs while its decision waits
// for its sync: buffered, the one sync after its result record makes
// both durable; streamed (a command's output), its decision syncs beside
// the command and its first event waits for that sync (durableGate).
// Nothing leaves the daemon before the records that explain it are
// durable, except the output events of a streamed command, which follow
// its durable decision.
func (c *call) pipeline(em emitter) {
	c.identify()
	if c.limited() { // rate and denial budget, before anything resolves (budget.go)
		c.finishLimited(em)
		return
	}
	c.resolve()
	c.dec = authz.Decide(c.p.m, &c.areq)
	c.narrow()
	c.d.m.decided(c)
	c.checkTask()
	if c.dec.Pending() && !c.awaitApproval(em) {
		return
	}
	c.countDenial() // budget.go
	seq, err := c.auditDecision()
	if err != nil {
		c.failClosed()
		c.finishDenied(em, 0)
		return
	}
	if !c.dec.Allowed() {
		c.finishDenied(em, seq)
		return
	}
	streaming := c.op.Streams && em.streams()
	var onChunk func(string, []byte)
	var gate *durableGate
	switch {
	case c.op.EffectsOf(c.tool):
		// The effect waits for the durable decision; what has none
		// (execute: a cold container made) overlaps the sync.
		if c.op.prepare != nil {
			c.op.prepare(c)
		}
		if err := c.d.ledger.Sync(seq); err != nil {
			c.failClosed()
			c.finishDenied(em, 0)
			return
		}
		if streaming {
			em.decision(c.decisionEvent())
			onChunk = em.output
		}
	case streaming:
		// An effect-free command starts now; its events wait for its
		// decision's sync, which runs beside it (group commit).
		gate = c.syncBeside(seq, em)
		onChunk = gate.output
	}
	// A buffered effect-free call (a read, list, search, a command
	// without egress) sends nothing before its result, so its decision
	// is only appended here (written, in the ledger's order, before it
	// runs) and the one fdatasync after the result record below makes
	// both durable before either leaves the daemon: one sync per call,
	// shared by group commit, instead of two.
	began := time.Now()
	onChunk, endChunks := c.redactChunks(onChunk)
	o := c.op.exec(c, onChunk)
	endChunks()
	c.redactOutcome(o)
	c.d.m.executed(c, time.Since(began))
	c.closeHandles()
	if gate != nil && !gate.close() {
		// The decision could not be made durable: the command was
		// killed, and nothing it printed leaves.
		c.failClosed()
		c.finishDenied(em, 0)
		return
	}
	rseq, err := c.auditResult(o)
	if err == nil {
		err = c.d.ledger.Sync(rseq)
	}
	if err != nil {
		// The decision is durable or nothing is; the output stays here.
		_ = c.d.ledger.Sync(seq)
		o = &outcome{reason: api.ReasonAuditUnavailable}
	}
	if !streaming {
		em.decision(c.decisionEvent())
		if len(o.output) > 0 && o.reason != api.ReasonAuditUnavailable {
			em.output("stdout", o.output)
		}
	}
	c.answered.Store(true)
	var late *time.Timer
	if box := c.held; box != nil {
		// A reply is written in well under this; a client slow to read
		// a large output does not keep the dead box (its uid, cgroups,
		// namespaces) past it, outside the container cap.
		late = time.AfterFunc(releaseAfter, box.Release)
	}
	em.result(c.present(o))
	if late != nil {
		late.Stop()
	}
	c.releaseHeld()
	c.d.m.called(c, o)
}

// durableGate holds a streamed effect-free call's events until its
// decision, synced beside the running command, is durable: then the
// decision event goes out, and every output event after it; if the
// sync fails the call's context ends (the command is killed) and no
// event leaves. It blocks the command's output rather than buffering it
// (the sandbox serializes the chunks and the pipes hold what the command
// prints meanwhile), so nothing is dropped or reordered and memory stays
// bounded.
type durableGate struct {
	c    *call
	em   emitter
	done chan struct{} // closed when the sync has returned
	err  error         // its error, read after done

	mu     sync.Mutex
	sent   bool // the decision event is out
	closed bool // the command has ended: a late chunk is not sent
}

// errAuditLost ends a call whose decision could not be made durable
// while its command ran.
var errAuditLost = errors.New("the call's decision could not be made durable")

// syncBeside starts making the decision seq durable beside the call.
func (c *call) syncBeside(seq uint64, em emitter) *durableGate {
	g := &durableGate{c: c, em: em, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		if g.err = c.d.ledger.Sync(seq); g.err != nil {
			c.stop(errAuditLost)
			return
		}
		// The decision goes out once durable, as a call with effects
		// sends it: the caller learns it was allowed (and its call id,
		// to cancel it by) while the command runs.
		g.mu.Lock()
		defer g.mu.Unlock()
		if !g.closed {
			g.sendDecision()
		}
	}()
	return g
}

// output is the command's chunk callback: each chunk waits for the
// durable decision, and goes out after the decision event.
func (g *durableGate) output(stream string, data []byte) {
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil || g.closed {
		return // withheld: the call ends audit_unavailable
	}
	g.sendDecision()
	g.em.output(stream, data)
}

// close ends the command's events once it has ended: it waits for the
// decision's sync and reports whether it succeeded; then the decision
// event is out, before the result.
func (g *durableGate) close() bool {
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.err != nil {
		return false
	}
	g.sendDecision()
	return true
}

func (g *durableGate) sendDecision() {
	if !g.sent {
		g.sent = true
		g.em.decision(g.c.decisionEvent())
	}
}

// releaseAfter bounds how long an execute call's dead box waits for its
// reply to be written (see call.held).
const releaseAfter = 100 * time.Millisecond

// releaseHeld lets an execute call's box go, once: see call.held.
func (c *call) releaseHeld() {
	if c.held != nil {
		c.held.Release()
		c.held = nil
	}
}

// finishDenied makes a denial durable and tells the caller. seq 0: there
// is no record to sync (the ledger failed).
func (c *call) finishDenied(em emitter, seq uint64) {
	if seq != 0 {
		if err := c.d.ledger.Sync(seq); err != nil {
			c.failClosed()
		}
	}
	em.decision(c.decisionEvent())
	c.answered.Store(true)
	em.result(c.present(nil))
	c.d.m.called(c, nil)
}

func (c *call) failClosed() {
	c.dec = authz.Decision{Reason: api.ReasonAuditUnavailable}
}

// outcome is what executing an allowed call produced: what every
// operation has, and the operation's own typed result.
type outcome struct {
	ok        bool
	reason    api.Reason
	output    []byte
	truncated bool
	// redacted counts the secrets replaced in what the call returns, by
	// kind (redact.go); set by an operation that redacted its output.
	redacted secretscan.Counts
	// result is the operation's own result (a command's exit, a write's
	// digest, a fetch's status and egress record); nil when it has none.
	result opResult
}

// opResult is one operation's own result: it knows its fields of the
// wire result (api.CallResult, flat per docs/api.md) and of the result
// record.
type opResult interface {
	// wire fills the operation's fields of the caller's result.
	wire(res *api.CallResult)
	// record fills the operation's fields of the result record.
	record(rec *audit.Record)
	// answered says the operation got an answer whose output is the
	// caller's even when the call is not ok (a command's exit or signal,
	// an HTTP status).
	answered() bool
}

func (c *call) principalRecord() *audit.Principal {
	return &audit.Principal{Name: c.recordName(), UID: c.peer.UID, GID: c.peer.GID, PID: c.peer.PID, Cgroup: c.peer.Cgroup}
}

// auditDecision appends the decision record (not yet synced). A call whose
// decision cannot be written is denied: audit_unavailable.
func (c *call) auditDecision() (uint64, error) {
	if !c.keepDecisionRecord() {
		return 0, nil // an unmapped uid over its rate: counted, see ratelimit.go
	}
	rec := &audit.Record{
		Kind: audit.KindDecision, CallID: c.id, Principal: c.principalRecord(), Task: c.req.Task,
		Tool: c.req.Tool, Args: c.argsRecord, Verdict: c.dec.WireVerdict(), Reason: c.dec.Reason,
		Rule: c.dec.Rule, PolicyVersion: c.p.m.Version, ApprovalID: c.approvalID, Token: c.tokenRef(), Grant: c.grantID,
	}
	if c.tool != nil {
		rec.Operation = c.tool.Operation
	}
	rec.Resource, rec.Resolved = c.recordedResources()
	if c.areq.ArgsError != "" {
		rec.Detail = c.areq.ArgsError // what replay needs to decide it again
	} else {
		rec.Detail = c.limitDetail
	}
	seq, err := c.d.ledger.Append(rec)
	if err != nil {
		c.d.log.Error("audit decision failed; denying", "err", err, "call_id", c.id)
	}
	return seq, err
}

// recordedResources is what the ledger keeps of the resource that decided
// and of each resolution: a path as the kernel named it; a fetch's or
// post's URL with its query values by digest (authz.RecordURL), though
// the caller and an approver see the URL itself.
func (c *call) recordedResources() (string, json.RawMessage) {
	if c.op == nil {
		return "", nil
	}
	var resource string
	if c.dec.Resource != nil {
		resource = c.dec.Resource.Path
		if c.op.Network() {
			resource = authz.RecordURL(resource)
		}
	}
	return resource, c.op.RecordResolved(c.areq.Resolved)
}

func (c *call) auditResult(o *outcome) (uint64, error) {
	rec := &audit.Record{
		Kind: audit.KindResult, CallID: c.id, Principal: c.principalRecord(), Task: c.req.Task,
		Tool: c.req.Tool, Verdict: c.dec.WireVerdict(), Reason: o.reason, PolicyVersion: c.p.m.Version,
		Result: &audit.Result{OK: o.ok, Bytes: int64(len(o.output)), Truncated: o.truncated, DurationMS: c.elapsedMS()},
		Token:  c.tokenRef(),
	}
	if len(o.redacted) > 0 && o.redacted.Total() > 0 {
		rec.Result.Redacted = o.redacted
	}
	if o.result != nil {
		o.result.record(rec)
	}
	var ce *cancelError
	if o.reason == api.ReasonCancelled && errors.As(context.Cause(c.ctx), &ce) {
		rec.Detail = ce.Error()
	}
	rec.Resource, _ = c.recordedResources()
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

// callerOf is what authz.Manifest.Identify needs of a peer.
func callerOf(p Peer) authz.Caller {
	return authz.Caller{UID: p.UID, GID: p.GID, Cgroup: p.Cgroup}
}
