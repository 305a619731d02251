package api

import (
	"runtime/debug"
	"sync"
)

// Status is the body of GET /v1/status: what the daemon is doing now. An
// approver sees every principal's calls and counts; any other principal
// only its own (Scope says which), and no pools.
type Status struct {
	Version       string `json:"version"`
	Revision      string `json:"revision,omitempty"` // the VCS revision the daemon was built from
	PolicyVersion string `json:"policy_version"`
	// Scope is "all" (an approver's view) or "own" (the caller's own
	// calls, approvals and denials).
	Scope     string       `json:"scope"`
	Principal string       `json:"principal,omitempty"` // the caller, as its peer credentials map
	Calls     []StatusCall `json:"calls"`               // calls in flight, oldest first
	Approvals StatusParked `json:"approvals"`           // calls waiting for a human
	Pools     []StatusPool `json:"pools,omitempty"`     // approvers only
	// MCPSessions is how many `sluice mcp` sessions sluiced serves
	// attached (docs/clients.md "Attached sessions"); approvers only.
	MCPSessions int           `json:"mcp_sessions,omitempty"`
	Denials     StatusDenials `json:"denials"` // recent denials by reason
	Tasks       int           `json:"tasks"`   // tasks the daemon remembers (see GET /v1/tasks)
	Audit       string        `json:"audit"`   // "ok" or "degraded"

	// Budgets are the principals' rates and denial budgets (budget.go):
	// the caller's own, an approver's everyone's; absent when none.
	Budgets []StatusBudget `json:"budgets,omitempty"`
}

// StatusCall is one call in flight.
type StatusCall struct {
	CallID    string  `json:"call_id"`
	Principal string  `json:"principal"`
	Tool      string  `json:"tool"`
	Task      string  `json:"task,omitempty"`
	Started   string  `json:"started"` // RFC 3339
	AgeS      float64 `json:"age_s"`
	// Parked: the call is waiting for an approver (ApprovalID).
	ApprovalID string `json:"approval_id,omitempty"`
}

// StatusParked counts the calls waiting for approval.
type StatusParked struct {
	Count int `json:"count"`
	// Oldest is when the longest-waiting one parked (RFC 3339), and
	// OldestAgeS how long ago; empty when none waits.
	Oldest     string  `json:"oldest,omitempty"`
	OldestAgeS float64 `json:"oldest_age_s,omitempty"`
}

// StatusPool is an execute tool's warm pool.
type StatusPool struct {
	Tool  string `json:"tool"`
	Ready int    `json:"ready"`
	Size  int    `json:"size"`
}

// StatusDenials counts the denials of the last WindowS seconds by reason.
type StatusDenials struct {
	WindowS  int            `json:"window_s"`
	Total    int            `json:"total"`
	ByReason map[string]int `json:"by_reason"`
}

// Tasks is the body of GET /v1/tasks: the tasks the daemon remembers
// (used within its task TTL, or with calls in flight), the caller's own
// (an approver's: everyone's).
type Tasks struct {
	Tasks []TaskInfo `json:"tasks"`
}

// TaskInfo is one task: a principal's own id.
type TaskInfo struct {
	Task       string `json:"task"`
	Principal  string `json:"principal"`
	Generation uint64 `json:"generation"`
	LastUsed   string `json:"last_used,omitempty"` // RFC 3339
	// Cancelled is when it was cancelled (RFC 3339), while it stays so.
	Cancelled string `json:"cancelled,omitempty"`
	InFlight  int    `json:"in_flight"`
}

// revision is set by the Makefile's build (-ldflags "-X
// github.com/sluicehq/sluice/api.revision=…", from git describe): the go
// command's own VCS stamp is often off (GOFLAGS=-buildvcs=false, builds in
// a VM from a copied tree).
var revision string

var buildOnce = sync.OnceValues(func() (rev string, modified bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "", false
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	return rev, modified
})

// Revision is the VCS revision the running binary was built from: the one
// make build sets (revision), else the go command's stamp
// (runtime/debug.ReadBuildInfo, "vcs.revision"), 12 hex digits, with
// "+dirty" when the tree had changes; empty when there is neither (go run,
// go test, go build with -buildvcs=false).
func Revision() string {
	if revision != "" {
		return revision
	}
	rev, modified := buildOnce()
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && modified {
		rev += "+dirty"
	}
	return rev
}

// BuildVersion is Version with the VCS revision, as --version prints it:
// "0.1.0 (rev 0123456789ab)", or "0.1.0" without a stamp.
func BuildVersion() string {
	if r := Revision(); r != "" {
		return Version + " (rev " + r + ")"
	}
	return Version
}
