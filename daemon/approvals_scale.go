//go:build linux

package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
)

// Approvals that scale (docs/security.md, "Approvals that scale"): a call
// of a tool with approvers N commits only once N distinct approver
// principals approved it, each vote its own ledger record; one denial
// denies it; nobody approves a call of its own principal; the approval
// that completes the N may grant later calls of the same tool, principal
// and task for some minutes; parked calls are announced to approver
// followers of GET /v1/events.

// approved is who approved pk so far, in order.
func (pk *parked) approved() []string {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	return slices.Clone(pk.approvedBy)
}

// handleApprovalDecide is POST /v1/approvals/{id}: one approver's vote.
// An approval of a call that needs more approvers is recorded and
// counted, and the call waits on (200, waiting); the approval that
// completes the N, or any denial, decides it. An approver whose
// principal is the call's own is refused (403, recorded); the same
// principal's second approval does not count twice (409).
func (d *Daemon) handleApprovalDecide(w http.ResponseWriter, r *http.Request, peer Peer, id string) {
	name, ok := d.approver(w, peer)
	if !ok {
		return
	}
	body, status, err := readBody(w, r, 64<<10)
	if err != nil {
		writeError(w, status, api.ErrBadRequest, err.Error())
		return
	}
	var req struct {
		Approve *bool             `json:"approve"`
		Note    *string           `json:"note"`
		Grant   *api.GrantRequest `json:"grant"`
	}
	if err := strictDecode(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, api.ErrBadRequest, describeJSONError("", err).Error())
		return
	}
	if req.Approve == nil {
		writeError(w, http.StatusBadRequest, api.ErrBadRequest, "approve: required (true or false)")
		return
	}
	note := ""
	if req.Note != nil {
		note = *req.Note
	}
	if len(note) > maxNote {
		writeError(w, http.StatusBadRequest, api.ErrBadRequest, "note: longer than 1024 bytes")
		return
	}
	if g := req.Grant; g != nil {
		switch {
		case !*req.Approve:
			writeError(w, http.StatusBadRequest, api.ErrBadRequest, "grant: only with \"approve\": true")
			return
		case g.Minutes < 1 || g.Minutes > api.MaxGrantMinutes:
			writeError(w, http.StatusBadRequest, api.ErrBadRequest, fmt.Sprintf("grant.minutes: is %d; use 1 to %d", g.Minutes, api.MaxGrantMinutes))
			return
		}
	}
	pk := d.approvals.get(id)
	if pk == nil {
		writeError(w, http.StatusConflict, api.ErrConflict, "no call waits under approval id "+id+" (decided, expired, withdrawn or unknown)")
		return
	}
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if pk.ended {
		writeError(w, http.StatusConflict, api.ErrConflict, "no call waits under approval id "+id+" (decided, expired, withdrawn or unknown)")
		return
	}
	c := pk.c
	p := d.acquire()
	m := p.m
	p.release()
	approver := &audit.Principal{Name: name, UID: peer.UID, GID: peer.GID, PID: peer.PID, Cgroup: peer.Cgroup}
	base := audit.Record{Kind: audit.KindApproval, ApprovalID: id, CallID: c.id, Principal: approver,
		Task: pk.shown.task, Tool: pk.shown.tool, Args: pk.shown.args, PolicyVersion: m.Version}
	if *req.Approve && (m.SameApprover(name, peer.UID, pk.shown.principal, c.peer.UID) || c.tok != nil && m.SameApprover(name, peer.UID, c.tok.peerName, c.peer.UID)) {
		// Nobody approves their own call: an agent that holds an
		// approver's uid (or is told by a poisoned document to approve
		// itself) gets no further than this record. A call made with a
		// delegation token is its minter's and its peer's both: neither
		// approves it.
		msg := fmt.Sprintf("principal %s may not approve a call of its own (call %s of principal %s); another approver principal must", name, c.id, pk.shown.principal)
		rec := base
		rec.Verdict, rec.Reason, rec.Detail = api.VerdictDeny, api.ReasonPrincipalNotAllowed, "self-approval refused: "+msg
		d.appendSynced(&rec, id)
		d.log.Warn("self-approval refused", "approval_id", id, "call_id", c.id, "approver", name)
		writeError(w, http.StatusForbidden, api.ErrForbidden, msg)
		return
	}
	if *req.Approve && slices.Contains(pk.approvedBy, name) {
		writeError(w, http.StatusConflict, api.ErrConflict, fmt.Sprintf("principal %s has approved this call already; it needs %d distinct approver principals (%d so far: %s)",
			name, pk.need, len(pk.approvedBy), strings.Join(pk.approvedBy, ", ")))
		return
	}
	final := !*req.Approve || len(pk.approvedBy)+1 >= pk.need
	if req.Grant != nil {
		var why string
		switch {
		case !pk.grantable:
			why = "a grant covers calls that wait before they run (\"approval\": \"human\"); a changeset's commit is approved one at a time"
		case pk.shown.task == "":
			why = "the call names no task, and a grant covers one task's calls"
		case !final:
			why = fmt.Sprintf("only the approval that completes the %d approvals may grant (%d so far)", pk.need, len(pk.approvedBy))
		}
		if why != "" {
			writeError(w, http.StatusBadRequest, api.ErrBadRequest, "grant: "+why)
			return
		}
	}
	if final {
		if d.approvals.take(id) == nil {
			writeError(w, http.StatusConflict, api.ErrConflict, "no call waits under approval id "+id+" (it expired or was withdrawn just now)")
			return
		}
		pk.ended = true
	}
	verdict := api.VerdictDeny
	if *req.Approve {
		verdict = api.VerdictAllow
	}
	rec := base
	rec.Verdict, rec.Detail = verdict, note
	seq, err := d.ledger.Append(&rec)
	var g *grant
	if err == nil && req.Grant != nil {
		g = d.approvals.grants.make(pk, req.Grant.Minutes, m.Version, d.approvals.now())
		var gseq uint64
		if gseq, err = d.ledger.Append(g.record(approver, id, c.id)); err == nil {
			seq = gseq
		}
	}
	if err == nil {
		err = d.ledger.Sync(seq)
	}
	if err != nil {
		// Fail closed: an approval (or its grant) that cannot be
		// recorded is a denial, and a vote that is not recorded does
		// not count.
		d.log.Error("audit approval failed", "err", err, "approval_id", id, "final", final)
		if final {
			pk.verdict <- approvalVerdict{approve: false, by: name} // no approver's note: none was recorded
			writeError(w, http.StatusServiceUnavailable, api.ErrUnavailable, "the audit ledger cannot be written; the call was denied")
			return
		}
		writeError(w, http.StatusServiceUnavailable, api.ErrUnavailable, "the audit ledger cannot be written; the approval was not counted")
		return
	}
	out := api.ApprovalOutcome{ApprovalID: id, CallID: c.id, Approvers: pk.need}
	if *req.Approve {
		pk.approvedBy = append(pk.approvedBy, name)
		if note != "" {
			pk.notes = append(pk.notes, name+": "+note)
		}
	}
	out.ApprovedBy = slices.Clone(pk.approvedBy)
	if !final {
		out.Waiting = true
		d.log.Info("approval counted; the call waits for more", "approval_id", id, "call_id", c.id, "approver", name,
			"approvals", len(pk.approvedBy), "needed", pk.need)
		writeJSON(w, http.StatusOK, out)
		return
	}
	v := approvalVerdict{approve: *req.Approve, note: note, by: name}
	if *req.Approve && pk.need > 1 {
		v.note = strings.Join(pk.notes, "\n") // every approver's note, each named
	}
	if g != nil {
		v.grant = g.id
		d.approvals.grants.add(g)
		out.Grant = g.wire()
	}
	pk.verdict <- v
	out.Approved = *req.Approve
	d.log.Info("approval decided", "approval_id", id, "call_id", c.id, "approver", name, "approved", *req.Approve, "grant", v.grant)
	writeJSON(w, http.StatusOK, out)
}

// appendSynced records rec durably, logging a failure (a refusal's
// record: the refusal stands either way).
func (d *Daemon) appendSynced(rec *audit.Record, id string) {
	seq, err := d.ledger.Append(rec)
	if err == nil {
		err = d.ledger.Sync(seq)
	}
	if err != nil {
		d.log.Error("audit approval record failed", "err", err, "approval_id", id)
	}
}

// announceParked tells approver followers of GET /v1/events that pk
// waits: what GET /v1/approvals shows of it, not its args.
func (d *Daemon) announceParked(pk *parked) {
	v := &pk.shown
	d.events.PublishApprovers(api.DaemonEvent{Event: api.DaemonEventApprovalParked, Approval: &api.ApprovalEvent{
		ApprovalID: pk.id, CallID: v.callID, Principal: v.principal, Tool: v.tool, Task: v.task,
		ExpiresAt: pk.expires.UTC().Format(time.RFC3339Nano), Approvers: pk.need}})
}

// announceDecided tells approver followers how pk's wait ended: the
// verdict v, or ended (the reason it ended without one).
func (d *Daemon) announceDecided(pk *parked, v approvalVerdict, ended api.Reason) {
	v2 := &pk.shown
	ev := &api.ApprovalEvent{ApprovalID: pk.id, CallID: v2.callID, Principal: v2.principal, Tool: v2.tool, Task: v2.task,
		Approvers: pk.need, ApprovedBy: pk.approved(), Verdict: api.VerdictDeny, Reason: ended}
	switch {
	case ended != "":
	case v.approve:
		ev.Verdict, ev.Reason, ev.By, ev.Grant = api.VerdictAllow, api.ReasonAllowed, v.by, v.grant
	default:
		ev.Reason, ev.By = api.ReasonApprovalDenied, v.by
	}
	d.events.PublishApprovers(api.DaemonEvent{Event: api.DaemonEventApprovalDecided, Approval: ev})
}

// stillApprover says whether peer is an approver principal under the
// manifest in force now (a follower subscribed as one may have been
// demoted by a reload since).
func (d *Daemon) stillApprover(peer Peer) bool {
	p := d.acquire()
	defer p.release()
	name, _ := p.m.Identify(callerOf(peer))
	return p.m.IsApprover(name, peer.UID)
}

// grant is one grant: calls of tool by principal in task run without
// approval until expires, while the manifest it was made under (version)
// is in force and the task is not cancelled.
type grant struct {
	id, principal, tool, task, version string
	minutes                            int
	expires                            time.Time
}

type grantKey struct{ principal, tool, task string }

// grantSet holds the grants in force, one per (principal, tool, task):
// a newer grant replaces an older one.
type grantSet struct {
	mu sync.Mutex
	by map[grantKey]*grant
}

func newGrantID() string { return "g-" + strings.TrimPrefix(newCallID(), "c-") }

// make builds the grant an approval of pk asks for (not yet in force).
func (gs *grantSet) make(pk *parked, minutes int, version string, now time.Time) *grant {
	return &grant{id: newGrantID(), principal: pk.shown.principal, tool: pk.shown.tool, task: pk.shown.task,
		version: version, minutes: minutes, expires: now.Add(time.Duration(minutes) * time.Minute)}
}

func (gs *grantSet) add(g *grant) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.by == nil {
		gs.by = map[grantKey]*grant{}
	}
	gs.by[grantKey{g.principal, g.tool, g.task}] = g
}

// covering is the grant in force for a call of tool by principal in task
// under policy version at now; nil when none (an expired one is dropped).
func (gs *grantSet) covering(principal, tool, task, version string, now time.Time) *grant {
	if task == "" {
		return nil
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	k := grantKey{principal, tool, task}
	g := gs.by[k]
	if g == nil {
		return nil
	}
	if !now.Before(g.expires) || g.version != version {
		delete(gs.by, k)
		return nil
	}
	return g
}

// endTasks ends the grants of the cancelled tasks keys; it returns how
// many it ended.
func (gs *grantSet) endTasks(keys []taskKey) int {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	n := 0
	for k := range gs.by {
		for _, tk := range keys {
			if k.principal == tk.principal && k.task == tk.id {
				delete(gs.by, k)
				n++
			}
		}
	}
	return n
}

// record is the grant's own ledger record: made by approver with the
// approval approvalID of call callID.
func (g *grant) record(approver *audit.Principal, approvalID, callID string) *audit.Record {
	args, _ := json.Marshal(map[string]any{"principal": g.principal, "tool": g.tool, "task": g.task,
		"minutes": g.minutes, "expires_at": g.expires.UTC().Format(time.RFC3339Nano)})
	return &audit.Record{Kind: audit.KindGrant, Grant: g.id, ApprovalID: approvalID, CallID: callID, Principal: approver,
		Task: g.task, Tool: g.tool, Args: args, Verdict: api.VerdictAllow, PolicyVersion: g.version,
		Detail: fmt.Sprintf("calls of %s by %s in task %s run without approval for %d minutes", g.tool, g.principal, g.task, g.minutes)}
}

func (g *grant) wire() *api.Grant {
	return &api.Grant{ID: g.id, Principal: g.principal, Tool: g.tool, Task: g.task, ExpiresAt: g.expires.UTC().Format(time.RFC3339Nano)}
}

// applyGrant lets a call that would wait for approval run at once when a
// grant covers it (its tool, principal and task, unexpired, made under
// the manifest in force): it is decided again as approved, and its
// decision record names the grant. It reports whether one did.
func (c *call) applyGrant() bool {
	if !c.dec.Pending() || c.req.Task == "" {
		return false
	}
	g := c.d.approvals.grants.covering(c.areq.Principal, c.req.Tool, c.req.Task, c.p.m.Version, c.d.approvals.now())
	if g == nil {
		return false
	}
	c.areq.Approved = true
	c.dec = authz.Decide(c.p.m, &c.areq)
	c.grantID = g.id
	return true
}

// warnSelfApproval logs each approver principal whose own calls of a
// tool needing one approval can never be approved: nobody approves a
// call of its own principal, and no other approver exists. (With
// approvers N the same is a load error.)
func warnSelfApproval(m *authz.Manifest, log interface {
	Warn(msg string, args ...any)
}) {
	for tool, ps := range m.SelfApprovalUnreachable() {
		for _, pn := range ps {
			log.Warn("an approver principal may call a tool that needs approval, and no other approver exists: its own calls of it can never be approved",
				"principal", pn, "tool", tool)
		}
	}
}
