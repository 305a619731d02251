//go:build linux

package daemon

import (
	"time"

	"github.com/sluicehq/sluice/api"
)

// awaitApprovalAfterRun parks a call that has already run (a command
// whose changeset commits with approval, docs/design.md §4) until an
// approver approves or denies what it shows, the wait expires
// (approval_timeout_ms) or the call ends. pending records the wait
// durably under the approval id before the call is listed; a failure
// there ends it audit_unavailable. The call keeps its policy while it
// waits (its changeset's fds are the policy's roots'), and at most
// --max-parked calls of a principal wait at once (busy beyond). It
// returns allowed when approved, else the reason the wait ended with.
func (c *call) awaitApprovalAfterRun(change *api.ApprovalChange, pending func(id string) error) api.Reason {
	id := newApprovalID()
	principal := c.areq.Principal
	if !c.d.approvals.reserve(principal) {
		return api.ReasonBusy
	}
	defer c.d.approvals.unreserve(principal)
	if err := pending(id); err != nil {
		return api.ReasonAuditUnavailable
	}
	timeout := time.Duration(c.tool.EffectiveApprovalTimeoutMS()) * time.Millisecond
	pk := &parked{id: id, c: c, expires: time.Now().Add(timeout), verdict: make(chan approvalVerdict, 1),
		need: c.tool.EffectiveApprovers()}
	pk.shown = parkedView{callID: c.id, principal: principal, tool: c.req.Tool, task: c.req.Task, args: c.argsRecord,
		t: c.tool, change: change}
	c.approvalID = id
	c.d.approvals.park(pk)
	c.d.announceParked(pk)
	c.d.log.Info("call waiting for approval after it ran", "approval_id", id, "call_id", c.id, "tool", c.req.Tool,
		"principal", principal, "expires_in", timeout.String())
	v, ended := c.waitVerdict(pk, timeout, nil)
	if ended != "" {
		return ended
	}
	c.approvalNote = v.note // the agent is told it (api.CallResult.ApprovalNote)
	if !v.approve {
		return api.ReasonApprovalDenied
	}
	return api.ReasonAllowed
}
