//go:build linux

package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/daemon/spill"
	"github.com/sluicehq/sluice/internal/errclass"
)

// approvals holds the calls parked until a human decides them.
type approvals struct {
	mu   sync.Mutex
	byID map[string]*parked
	// max bounds the calls one principal may have parked at once
	// (--max-parked); n counts them, by principal name.
	max   int
	n     map[string]int
	spill *spill.Store // set by openSpill, before the socket is served
	// grants are what approvers granted with approvals (grants.go); now
	// is their clock (Config.approvalClock in tests).
	grants grantSet
	now    func() time.Time
}

// parked is one waiting call. An approval is the call itself: bound to
// its exact intent (principal, tool, args as decoded), decided once.
// While it waits its request body is on disk (sp), not in the heap.
type parked struct {
	id      string
	c       *call
	expires time.Time
	verdict chan approvalVerdict // buffered; written once, by take's winner
	sp      *spill.Body
	// content is the sha256 of a write's content, as recorded in the args
	// the approver saw: the approval is bound to it.
	content string
	// shown is what GET /v1/approvals shows, copied when the call parks:
	// an approved call goes on to change its own fields.
	shown parkedView
	// need is how many distinct approver principals must approve the
	// call (the tool's approvers); grantable says an approval of it may
	// grant later calls (it waits before it runs: approval "human").
	need      int
	grantable bool
	// mu orders the votes on the call (approvals_scale.go): each is
	// recorded before it counts; the one that completes or denies it
	// takes it and sets ended. approvedBy and notes are the approvals
	// counted so far.
	mu         sync.Mutex
	ended      bool
	approvedBy []string
	notes      []string
}

// parkedView is a parked call as the approvals list shows it.
type parkedView struct {
	callID, principal, tool, task string
	args                          json.RawMessage
	token                         *api.ApprovalToken // the call's delegation token, if any
	t                             *authz.Tool
	op                            *opSpec
	path                          string // the first target's path, when it is one
	res                           *authz.Resource
	// change is what the call's operation shows an approver of it, as
	// far as its args say (authz.Op.Approval, made when it parked); the
	// operation's daemon half adds the rest when it is listed.
	change *api.ApprovalChange
}

type approvalVerdict struct {
	approve bool
	note    string
	by      string // the approver whose vote decided it
	grant   string // the grant that approval made, if any
}

// DefaultMaxParked is how many calls one principal may have waiting for
// approval at once: more than a person deciding them keeps up with, few
// enough that one agent cannot fill the list (or the disk) for everyone.
const DefaultMaxParked = 16

func newApprovals(max int, now func() time.Time) *approvals {
	if max <= 0 {
		max = DefaultMaxParked
	}
	if now == nil {
		now = time.Now
	}
	return &approvals{byID: map[string]*parked{}, max: max, n: map[string]int{}, now: now}
}

// openSpill opens STATE_DIR/parked, removing what an earlier run left
// there; the returned func closes it.
func (a *approvals) openSpill(stateDir string, log interface {
	Warn(msg string, args ...any)
}) (func(), error) {
	s, n, err := spill.Open(stateDir)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		log.Warn("removed the bodies of parked calls an earlier run left", "count", n)
	}
	a.spill = s
	return s.Close, nil
}

// reserve takes one of principal's parked slots; false when it has
// max calls parked already (the call is then denied busy).
func (a *approvals) reserve(principal string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n[principal] >= a.max {
		return false
	}
	a.n[principal]++
	return true
}

func (a *approvals) unreserve(principal string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n[principal]--; a.n[principal] <= 0 {
		delete(a.n, principal)
	}
}

func (a *approvals) park(pk *parked) {
	a.mu.Lock()
	a.byID[pk.id] = pk
	a.mu.Unlock()
}

// take removes a parked call: whoever takes it decides it, exactly once.
func (a *approvals) take(id string) *parked {
	a.mu.Lock()
	defer a.mu.Unlock()
	pk := a.byID[id]
	delete(a.byID, id)
	return pk
}

// get returns a parked call without taking it (a vote that does not
// decide it yet leaves it parked).
func (a *approvals) get(id string) *parked {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byID[id]
}

func (a *approvals) list() []*parked {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*parked, 0, len(a.byID))
	for _, pk := range a.byID {
		out = append(out, pk)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func newApprovalID() string { return "a-" + strings.TrimPrefix(newCallID(), "c-") }

// awaitApproval is docs/design.md §1 step 5. The pending decision is made durable
// and announced (streamed callers get a pending decision event with the
// approval id at once; others wait); the call then holds no fd and no
// container, and not even its policy, until an approver decides, the
// approval expires, or the call's context ends. Approved, it is resolved
// and decided again under the manifest current then (a reload that
// removed the tool denies it) and the pipeline goes on. It returns false
// when the call has ended here.
//
// Review finding 6 (parked calls pinned memory): a principal has at most
// --max-parked calls waiting (one more is denied busy), and a waiting
// call's body is on disk in STATE_DIR/parked, not in the heap; approved,
// it is read back and must hash to what was spilled (and a write's
// content to the digest the approver saw) before it is decided again.
func (c *call) awaitApproval(em emitter) bool {
	if c.applyGrant() {
		return true // a grant covers it: decided again as approved, it runs now
	}
	id := newApprovalID()
	timeout := time.Duration(c.tool.EffectiveApprovalTimeoutMS()) * time.Millisecond
	pk := &parked{id: id, c: c, expires: time.Now().Add(timeout), verdict: make(chan approvalVerdict, 1),
		need: c.tool.EffectiveApprovers(), grantable: true}
	// Bounded pending work: at most --max-parked calls per principal wait
	// at once; beyond that the call is denied busy, and recorded so.
	principal := c.areq.Principal
	if !c.d.approvals.reserve(principal) {
		c.dec = authz.Decision{Reason: api.ReasonBusy, Rule: "max_parked"}
		c.finishDecided(em)
		return false
	}
	defer c.d.approvals.unreserve(principal)
	// The body goes to disk for the wait, and is removed however the call
	// ends; an approved call reads it back (and checks it) first.
	sp, err := c.d.approvals.spill.Put(id, c.body)
	if err != nil {
		c.d.log.Error("spilling a parked call's body failed; denying", "err", err, "call_id", c.id)
		reason, _ := errclass.Reason(err) // ENOSPC no_space, ...
		c.dec = authz.Decision{Reason: reason, Rule: "tools." + c.req.Tool + ".approval"}
		c.finishDecided(em)
		return false
	}
	defer c.d.approvals.spill.Remove(sp)
	pk.sp = sp
	if b, ok := c.boundContent(); ok {
		pk.content = sha256Of(b)
	}
	c.approvalID = id
	seq, err := c.auditDecision()
	if err == nil {
		err = c.d.ledger.Sync(seq)
	}
	if err != nil {
		c.failClosed()
		c.finishDenied(em, 0)
		return false
	}
	c.closeHandles()
	pk.shown = parkedView{callID: c.id, principal: c.areq.Principal, tool: c.req.Tool, task: c.req.Task, args: c.argsRecord,
		t: c.tool, op: c.op, change: c.op.Approval(c.tool, &c.args)}
	if id := c.tokenID(); id != "" {
		pk.shown.token = &api.ApprovalToken{ID: id, Subject: c.tok.g.subject}
	}
	if tg := c.op.Targets; len(tg) > 0 && tg[0].Resolve != authz.ResolveNet {
		if v := tg[0].Value(c.areq.Args); v != nil {
			pk.shown.path = *v
		}
	}
	if c.dec.Resource != nil {
		r := *c.dec.Resource
		r.Net = nil // a URL's authorized request: made again after the wait
		pk.shown.res = &r
	}
	c.dropBody()
	// Parked before it is announced: an approver quick enough to act on
	// the pending event must find it.
	c.d.approvals.park(pk)
	c.d.announceParked(pk)
	em.decision(api.DecisionEvent{Event: api.EventDecision, CallID: c.id, Verdict: api.VerdictPending,
		Reason: api.ReasonApprovalRequired, ApprovalID: id, ExpiresAt: pk.expires.UTC().Format(time.RFC3339Nano)})
	c.d.log.Info("call waiting for approval", "approval_id", id, "call_id", c.id, "tool", c.req.Tool,
		"principal", c.areq.Principal, "expires_in", timeout.String())
	// Parked: the policy goes back, so a reload is not held up and its
	// old pools can drain.
	c.p.release()
	c.p = nil
	v, ended := c.waitVerdict(pk, timeout, func() { c.p = c.d.acquire() })
	if ended != "" {
		if context.Cause(c.ctx) == errClientGone {
			return false // nobody to tell; the ledger says what happened
		}
		return c.denyAfterApproval(em, ended)
	}
	c.p = c.d.acquire()
	if !v.approve {
		c.approvalNote = v.note
		return c.denyAfterApproval(em, api.ReasonApprovalDenied)
	}
	// Approved: decided again, from the same request, under the current
	// manifest. Fresh resolution: nothing from before the wait is used.
	// Read back and checked: the body is the one spilled (its sha256),
	// and a write's content is the one whose digest the approver saw.
	body, err := c.d.approvals.spill.Get(sp)
	if err != nil {
		c.d.log.Error("approved call's spilled body cannot be read back; denying", "err", err, "call_id", c.id)
		reason, _ := errclass.Reason(err) // ENOSPC no_space, ...
		c.dec = authz.Decision{Reason: reason, Rule: "tools." + c.req.Tool + ".approval"}
		c.finishDecided(em)
		return false
	}
	dc, err := decodeCall(c.p.m, body)
	if b, ok := dc.boundContent(); err == nil && pk.content != "" && ok && sha256Of(b) != pk.content {
		c.d.log.Error("approved call's content is not the approved content; denying", "call_id", c.id)
		c.dec = authz.Decision{Reason: api.ReasonInternalError, Rule: "tools." + c.req.Tool + ".approval"}
		c.finishDecided(em)
		return false
	}
	if err != nil {
		c.d.log.Warn("approved call no longer decodes under the current manifest", "err", err, "call_id", c.id)
		c.dec = authz.Decision{Reason: api.ReasonInvalidArgs}
		c.finishDecided(em)
		return false
	}
	c.decoded = dc
	c.approvalNote = v.note // the agent is told it (api.CallResult.ApprovalNote)
	c.areq.Approved = true
	c.identify()
	c.resolve()
	c.dec = authz.Decide(c.p.m, &c.areq)
	c.narrow()
	c.checkTask()
	return true
}

// waitVerdict waits for an approver's verdict on pk, its expiry after
// timeout, or the end of the call, whichever comes first; an approver who
// took pk at the last moment wins. ended is "" with the verdict, else
// approval_expired or the call's end reason, and the wait's end is then
// recorded, after before (a parked call that gave its policy back takes
// one again).
func (c *call) waitVerdict(pk *parked, timeout time.Duration, before func()) (v approvalVerdict, ended api.Reason) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	detail := ""
	defer func() { c.d.announceDecided(pk, v, ended) }()
	select {
	case v = <-pk.verdict:
		return v, ""
	case <-timer.C:
		ended, detail = api.ReasonApprovalExpired, "expired after "+timeout.String()
	case <-c.ctx.Done():
		ended, detail = c.endReason(), "withdrawn while waiting: "+context.Cause(c.ctx).Error()
	}
	if c.d.approvals.take(pk.id) == nil {
		v = <-pk.verdict // an approver took it at the last moment
		ended = ""
		return v, ""
	}
	if before != nil {
		before()
	}
	c.auditApprovalEnd(pk.id, ended, detail)
	return v, ended
}

// dropBody lets go of what a parked call does not need while it waits:
// its body (spilled), its raw args and its typed args (a write's content,
// a post's body). What stays is small: the recorded args (no file bodies;
// at most 8 KiB), what the approval list shows, and the decision.
func (c *call) dropBody() {
	c.body, c.req.Args, c.areq.Args = nil, nil, nil
	c.args = authz.Args{}
}

// boundContent is what an approval binds a call to: a write's content or
// a post's body (the approver saw it; the approved call must carry the
// same bytes).
func (dc *decoded) boundContent() ([]byte, bool) {
	if dc.op == nil || !dc.op.Binds {
		return nil, false
	}
	return dc.args.Bound, true
}

// denyAfterApproval ends a parked call with a final denial.
func (c *call) denyAfterApproval(em emitter, reason api.Reason) bool {
	c.dec = authz.Decision{Reason: reason, Rule: "tools." + c.req.Tool + ".approval"}
	c.finishDecided(em)
	return false
}

// finishDecided records a final (denying) decision and tells the caller.
func (c *call) finishDecided(em emitter) {
	seq, err := c.auditDecision()
	if err != nil {
		c.failClosed()
		seq = 0
	}
	c.finishDenied(em, seq)
}

// auditApprovalEnd records how a wait ended without an approver.
func (c *call) auditApprovalEnd(id string, reason api.Reason, detail string) {
	seq, err := c.d.ledger.Append(&audit.Record{Kind: audit.KindApproval, ApprovalID: id, CallID: c.id,
		Principal: c.principalRecord(), Token: c.tokenRef(), Task: c.req.Task, Tool: c.req.Tool, Verdict: api.VerdictDeny,
		Reason: reason, Detail: detail, PolicyVersion: c.p.m.Version})
	if err == nil {
		err = c.d.ledger.Sync(seq)
	}
	if err != nil {
		c.d.log.Error("audit approval record failed", "err", err, "approval_id", id)
	}
}

const maxNote = 1024

func (d *Daemon) approver(w http.ResponseWriter, peer Peer) (string, bool) {
	p := d.acquire()
	defer p.release()
	name, _ := p.m.Identify(callerOf(peer))
	if !p.m.IsApprover(name, peer.UID) {
		writeError(w, http.StatusForbidden, api.ErrForbidden, "only an approver principal may see or decide approvals")
		return "", false
	}
	return name, true
}

func (d *Daemon) handleApprovals(w http.ResponseWriter, r *http.Request, peer Peer) {
	if _, ok := d.approver(w, peer); !ok {
		return
	}
	out := api.Approvals{Approvals: []api.Approval{}}
	p := d.acquire()
	defer p.release()
	for _, pk := range d.approvals.list() {
		v := &pk.shown
		out.Approvals = append(out.Approvals, api.Approval{ApprovalID: pk.id, CallID: v.callID, Principal: v.principal,
			Tool: v.tool, Args: v.args, Task: v.task, ExpiresAt: pk.expires.UTC().Format(time.RFC3339Nano),
			Change: d.approvalChange(r.Context(), p, pk), Approvers: pk.need, ApprovedBy: pk.approved(), Token: v.token})
	}
	writeJSON(w, http.StatusOK, out)
}
