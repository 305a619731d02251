// Package replay re-decides a ledger's recorded decisions under another
// manifest with the pure authz.Decide, from what each decision record
// holds (the caller's credentials, tool, args, and the kernel's recorded
// resolution of the path), and reports what would change. It touches no
// filesystem: a resolution is what the daemon recorded when it decided.
package replay

import (
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
)

// Change is one call whose decision would differ.
type Change struct {
	Seq       uint64      `json:"seq"`
	CallID    string      `json:"call_id"`
	Time      string      `json:"time"`
	Principal string      `json:"principal"`
	Tool      string      `json:"tool"`
	Subject   string      `json:"subject,omitempty"` // the path or argv
	Old       api.Verdict `json:"old_verdict"`
	OldReason api.Reason  `json:"old_reason"`
	New       api.Verdict `json:"new_verdict"`
	NewReason api.Reason  `json:"new_reason"`
	Rule      string      `json:"new_rule,omitempty"`
}

// Report is the outcome of a replay.
type Report struct {
	Decisions   int      `json:"decisions"`
	Changed     int      `json:"changed"`
	AllowToDeny int      `json:"allow_to_deny"`
	DenyToAllow int      `json:"deny_to_allow"`
	Other       int      `json:"other_changes"` // reason-only, or to/from pending
	Undecidable int      `json:"undecidable"`   // args recorded by digest only
	Changes     []Change `json:"changes"`
}

// Summary is the one-line summary: "N decisions, M would change: a
// allow→deny, b deny→allow" (and the rest, when there is any).
func (r *Report) Summary() string {
	s := fmt.Sprintf("%d decisions, %d would change: %d allow→deny, %d deny→allow", r.Decisions, r.Changed, r.AllowToDeny, r.DenyToAllow)
	if r.Other > 0 {
		s += fmt.Sprintf(", %d other (reason or pending)", r.Other)
	}
	if r.Undecidable > 0 {
		s += fmt.Sprintf("; %d not re-decidable (args recorded by digest only)", r.Undecidable)
	}
	return s
}

// runtimeReasons are outcomes that came from people or the daemon's state,
// not from the policy: a denial for one of them stands unless the new
// policy denies the call for a policy reason.
var runtimeReasons = map[api.Reason]bool{
	api.ReasonApprovalDenied: true, api.ReasonApprovalExpired: true, api.ReasonTaskCancelled: true,
	api.ReasonAuditUnavailable: true, api.ReasonBusy: true, api.ReasonNoSpace: true,
	api.ReasonTokenInvalid: true, // the token's state then (docs/tokens.md)
}

// Run reads a ledger (checking its chain; a break is an *audit.VerifyError)
// and re-decides every decision under m.
func Run(m *authz.Manifest, r io.Reader) (*Report, error) {
	rep := &Report{Changes: []Change{}}
	approved := map[string]bool{} // approval id -> an approver approved it
	granted := map[string]bool{}  // grant id -> an approver granted it
	var recs []*audit.Record
	err := audit.Read(r, func(rec *audit.Record) error {
		switch rec.Kind {
		case audit.KindApproval:
			if rec.Verdict == api.VerdictAllow && rec.Reason == "" {
				approved[rec.ApprovalID] = true
			}
		case audit.KindGrant:
			granted[rec.Grant] = true
		case audit.KindDecision:
			recs = append(recs, rec)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A call that waited for a human has a pending decision and then a
	// final one: the final one is what is re-decided.
	final := map[string]bool{}
	for _, rec := range recs {
		if rec.Verdict != api.VerdictPending {
			final[rec.CallID] = true
		}
	}
	for _, rec := range recs {
		if rec.Verdict == api.VerdictPending && final[rec.CallID] {
			continue
		}
		rep.Decisions++
		if rec.Reason == api.ReasonRateLimited || rec.Reason == api.ReasonBudgetExhausted {
			// Refused by the principal's budgets, which the daemon keeps,
			// before the policy was asked: nothing was resolved to decide
			// again, and the refusal stands.
			continue
		}
		req, subject, ok := request(m, rec)
		if !ok {
			rep.Undecidable++
			continue
		}
		// A call a grant let run was approved by the grant's approver.
		req.Approved = rec.ApprovalID != "" && approved[rec.ApprovalID] || rec.Grant != "" && granted[rec.Grant]
		d := authz.Decide(m, req)
		oldV, oldR := rec.Verdict, rec.Reason
		newV, newR := d.WireVerdict(), d.Reason
		// A call made with a delegation token is decided as its minter
		// (request); what the token itself refused (rule "token…":
		// its tools, its task) is not in the manifest and stands.
		tokenRule := rec.Token != nil && strings.HasPrefix(rec.Rule, "token")
		if (runtimeReasons[oldR] || tokenRule) && (d.Allowed() || d.Pending()) {
			newV, newR = oldV, oldR // a person or the daemon's state decided this one
		}
		if newV == oldV && newR == oldR {
			continue
		}
		rep.Changed++
		switch {
		case oldV == api.VerdictAllow && newV == api.VerdictDeny:
			rep.AllowToDeny++
		case oldV == api.VerdictDeny && newV == api.VerdictAllow:
			rep.DenyToAllow++
		default:
			rep.Other++
		}
		c := Change{Seq: rec.Seq, CallID: rec.CallID, Time: rec.Time, Tool: rec.Tool, Subject: subject,
			Old: oldV, OldReason: oldR, New: newV, NewReason: newR, Rule: d.Rule}
		if rec.Principal != nil {
			c.Principal = rec.Principal.Name
		}
		rep.Changes = append(rep.Changes, c)
	}
	return rep, nil
}

// request rebuilds the authz request a decision record describes, under
// m: the principal from the recorded credentials mapped through m, the
// args decoded by the recorded operation's own pure half (authz.Op), as
// the daemon decoded them, and each of m's matching roots given the
// resolution recorded for the same root (a root m has that the record
// lacks was never resolved: not_found).
func request(m *authz.Manifest, rec *audit.Record) (*authz.Request, string, bool) {
	t := m.Tools[rec.Tool]
	o := authz.LookupOp(rec.Operation)
	if t != nil {
		// Decided as the tool that has the name now would: its own
		// operation reads the args as recorded (a tool unknown when
		// decided had its args recorded as given).
		if now := authz.LookupOp(t.Operation); now != nil {
			o = now
		}
	}
	var a authz.Args
	if o != nil {
		var ok bool
		if a, ok = o.ArgsFromRecord(t, rec.Args); !ok {
			return nil, "", false
		}
	}
	r := a.Request("", rec.Tool)
	req := &r
	if p := rec.Principal; p != nil {
		req.Principal, _ = m.Identify(authz.Caller{UID: p.UID, GID: p.GID, Cgroup: p.Cgroup})
	}
	if rec.Token != nil {
		req.Principal = rec.Token.Minter // the token's rights are its minter's, narrowed
	}
	// The daemon records an args error in detail whenever there was one.
	req.ArgsError = rec.Detail
	if rec.Reason == api.ReasonInvalidArgs && req.ArgsError == "" {
		req.ArgsError = "invalid args (recorded)"
	}
	subject := ""
	if a.Value != nil {
		subject = a.Value.Subject()
	}
	if t == nil || o == nil || len(o.Targets) == 0 {
		return req, subject, true
	}
	recorded := o.ResolvedFromRecord(rec.Resolved)
	req.Resolved = make([][]authz.Resource, len(o.Targets))
	for i := range o.Targets {
		tg := &o.Targets[i]
		if tg.Resolve == authz.ResolveArgs {
			// An execute's arguments as the kernel resolved them beneath
			// its path elements' roots: the decision matches them by
			// argument and root (a record from before patterns has none).
			req.Resolved[i] = recorded[i]
			continue
		}
		v := tg.Value(a.Value)
		if v == nil {
			continue
		}
		if tg.Resolve == authz.ResolveNet {
			// A fetch's or post's one lookup of its host, as recorded:
			// the addresses are what the decision checks. A host never
			// looked up (its URL was refused when recorded) counts as a
			// name that did not resolve.
			if len(recorded[i]) == 1 {
				req.Resolved[i] = recorded[i][:1]
			} else {
				req.Resolved[i] = []authz.Resource{{Outcome: authz.OutcomeNotFound}}
			}
			continue
		}
		if authz.CheckPath(*v) != "" {
			continue
		}
		for _, mt := range authz.MatchRoots(t, *v) {
			res := authz.Resource{Root: mt.Index, RootPath: mt.Root, Outcome: authz.OutcomeNotFound}
			for _, r := range recorded[i] {
				if r.RootPath != "" && path.Clean(r.RootPath) == path.Clean(mt.Root) {
					res = r
					res.Root = mt.Index
					break
				}
			}
			req.Resolved[i] = append(req.Resolved[i], res)
		}
	}
	return req, subject, true
}
