package daemon

import (
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
)

// handleTaskCancel is POST /v1/tasks/{task}/cancel: approvers, and the
// principal that owns the task (made a call with it), may cancel it. Its
// generation is bumped: its running commands are killed, parked calls end
// task_cancelled, a write that has not committed does not, and new calls
// with it are denied task_cancelled for the task TTL.
func (d *Daemon) handleTaskCancel(w http.ResponseWriter, r *http.Request, peer Peer, task string) {
	p := d.acquire()
	name, _ := p.m.Identify(peer.UID, peer.GID)
	allowed := p.m.IsApprover(name, peer.UID) || (name != "" && d.calls.owns(task, name))
	version := p.m.Version
	p.release()
	if !allowed {
		writeError(w, http.StatusForbidden, api.ErrForbidden, "only an approver, or the principal whose task it is, may cancel task "+strconv.Quote(task))
		return
	}
	// Recorded first: a cancel that cannot be audited does not happen.
	seq, err := d.ledger.Append(&audit.Record{Kind: audit.KindTaskCancelled, Task: task, PolicyVersion: version,
		Principal: &audit.Principal{Name: name, UID: peer.UID, GID: peer.GID, PID: peer.PID}})
	if err == nil {
		err = d.ledger.Sync(seq)
	}
	if err != nil {
		d.log.Error("audit task_cancelled failed; not cancelling", "err", err, "task", task)
		writeError(w, http.StatusServiceUnavailable, api.ErrUnavailable, "the audit ledger cannot be written; the task was not cancelled")
		return
	}
	n, gen := d.calls.cancelTask(task, name)
	d.log.Info("task cancelled", "task", task, "by", name, "calls_ended", n, "generation", gen)
	writeJSON(w, http.StatusOK, api.TaskCancel{Task: task, Generation: gen, Ended: n})
}
