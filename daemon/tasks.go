//go:build linux

package daemon

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
)

// handleTaskCancel is POST /v1/tasks/{task}/cancel. A task belongs to
// (principal, task id): a principal may cancel its own task once one of
// its allowed calls used it; an approver may cancel every principal's task
// of that id, or one principal's with ?principal=NAME (which also
// pre-cancels it). Anyone else gets 403 and the task is left as it was,
// so no principal can end, or pre-cancel, another's work. A cancelled
// task's generation is bumped: its running commands are killed, parked
// calls end task_cancelled, a write that has not committed does not, and
// new calls with it are denied task_cancelled for the task TTL.
func (d *Daemon) handleTaskCancel(w http.ResponseWriter, r *http.Request, peer Peer, task string) {
	p := d.acquire()
	name, _ := p.m.Identify(callerOf(peer))
	approver := p.m.IsApprover(name, peer.UID)
	version := p.m.Version
	p.release()
	var keys []taskKey
	switch only := r.URL.Query().Get("principal"); {
	case approver && only != "":
		keys = []taskKey{{only, task}}
	case approver:
		keys = d.calls.tasksNamed(task)
	case name != "" && d.calls.owns(name, task) && (only == "" || only == name):
		keys = []taskKey{{name, task}}
	default:
		writeError(w, http.StatusForbidden, api.ErrForbidden, "only an approver, or the principal whose allowed calls used it, may cancel task "+strconv.Quote(task))
		return
	}
	owners := make([]string, len(keys))
	for i, k := range keys {
		owners[i] = k.principal
	}
	// Recorded first: a cancel that cannot be audited does not happen.
	seq, err := d.ledger.Append(&audit.Record{Kind: audit.KindTaskCancelled, Task: task, PolicyVersion: version,
		Detail:    "tasks of: " + strings.Join(owners, ","),
		Principal: &audit.Principal{Name: name, UID: peer.UID, GID: peer.GID, PID: peer.PID, Cgroup: peer.Cgroup}})
	if err == nil {
		err = d.ledger.Sync(seq)
	}
	if err != nil {
		d.log.Error("audit task_cancelled failed; not cancelling", "err", err, "task", task)
		writeError(w, http.StatusServiceUnavailable, api.ErrUnavailable, "the audit ledger cannot be written; the task was not cancelled")
		return
	}
	n, gen := d.calls.cancelTask(keys)
	revoked := d.tokens.revokeTasks(keys) // the task's delegation tokens end with it
	if len(revoked) > 0 {
		d.tokensChanged() // and their budgets
	}
	d.approvals.grants.endTasks(keys) // and its grants
	d.log.Info("task cancelled", "task", task, "of", owners, "by", name, "calls_ended", n, "generation", gen, "tokens_revoked", revoked)
	writeJSON(w, http.StatusOK, api.TaskCancel{Task: task, Generation: gen, Ended: n})
}

// handleCallCancel is POST /v1/calls/{call_id}/cancel: it ends one call in
// flight with reason cancelled (a running command is killed, a parked call
// ends, a write not yet committed does not commit). Only the call's own
// principal, as SO_PEERCRED named it when the call began, or an approver
// may cancel it. Anyone else gets the same 404 as for an unknown id: a 403
// would tell a principal that another's call id exists (an oracle for ids
// seen in logs or guessed). The result record, written by the call as it
// ends, says cancelled and by whom.
func (d *Daemon) handleCallCancel(w http.ResponseWriter, r *http.Request, peer Peer, id string) {
	if d.cancelWithToken(w, r, peer, id) {
		return
	}
	p := d.acquire()
	name, _ := p.m.Identify(callerOf(peer))
	approver := p.m.IsApprover(name, peer.UID)
	p.release()
	by := name
	if by == "" {
		by = "uid " + strconv.FormatUint(uint64(peer.UID), 10)
	}
	if !d.calls.cancelCall(id, name, approver, by) {
		writeError(w, http.StatusNotFound, api.ErrNotFound, "no call "+strconv.Quote(id)+" of yours is in flight")
		return
	}
	d.log.Info("call cancelled", "call_id", id, "by", by)
	writeJSON(w, http.StatusOK, api.CallCancel{CallID: id})
}
