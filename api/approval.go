package api

// Approvals that scale (docs/api.md, "Approvals"): several approvers per
// call, grants, and parked calls announced on GET /v1/events.

// GrantRequest asks, with an approval, that later calls of the same tool
// by the same principal in the same task run without waiting for
// approval for Minutes minutes (1 to MaxGrantMinutes).
type GrantRequest struct {
	Minutes int `json:"minutes"`
}

// MaxGrantMinutes bounds a grant: a day at most.
const MaxGrantMinutes = 24 * 60

// Grant is what an approval granted: calls of Tool by Principal in Task
// run without approval until ExpiresAt (RFC 3339), or until the task is
// cancelled or the manifest reloads. Each call it covers names ID in its
// decision record ("grant").
type Grant struct {
	ID        string `json:"id"`
	Principal string `json:"principal"`
	Tool      string `json:"tool"`
	Task      string `json:"task"`
	ExpiresAt string `json:"expires_at"`
}

// Daemon events about approvals, sent to followers of GET /v1/events
// that are approver principals (and to no one else).
const (
	// DaemonEventApprovalParked: a call waits for approval (Approval says
	// which; GET /v1/approvals shows what it would do).
	DaemonEventApprovalParked = "approval_parked"
	// DaemonEventApprovalDecided: a parked call's wait ended: approved,
	// denied, expired, or ended by its caller, a cancel or shutdown.
	DaemonEventApprovalDecided = "approval_decided"
)

// ApprovalEvent is the approval a DaemonEvent is about: what GET
// /v1/approvals shows of it, never its args.
type ApprovalEvent struct {
	ApprovalID string `json:"approval_id"`
	CallID     string `json:"call_id"`
	Principal  string `json:"principal"`
	Tool       string `json:"tool"`
	Task       string `json:"task,omitempty"`
	ExpiresAt  string `json:"expires_at,omitempty"`
	// Approvers is how many distinct approver principals the call needs;
	// ApprovedBy who approved it so far.
	Approvers  int      `json:"approvers,omitempty"`
	ApprovedBy []string `json:"approved_by,omitempty"`
	// Verdict and Reason are how a decided wait ended: allow (allowed),
	// or deny (approval_denied, approval_expired, task_cancelled, ...);
	// By is the approver who ended it, when one did.
	Verdict Verdict `json:"verdict,omitempty"`
	Reason  Reason  `json:"reason,omitempty"`
	By      string  `json:"by,omitempty"`
	// Grant is the id of the grant the deciding approval made, if any.
	Grant string `json:"grant,omitempty"`
}
