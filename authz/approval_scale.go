package authz

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/egress/netpolicy"
)

// Approvals that scale (docs/manifest.md, "approvers and approval_when";
// docs/security.md, "Approvals that scale"): a tool's approvers (how many
// distinct approver principals must approve one call: two-person control)
// and its approval_when (which of its calls park at all, so that an
// approver is asked only about the risky ones: approval fatigue).

// ApprovalWhen narrows "approval": "human" to the calls it matches; the
// others run without approval. Each operation takes the one key that
// names what its calls target (Op.when): file tools paths, execute
// commands, post urls.
type ApprovalWhen struct {
	// Paths are globs matched as never globs are: against the path
	// relative to its root, as requested and as the kernel resolved it,
	// and against each name in it ("deploy/**", "*.sql").
	Paths []string `json:"paths,omitempty" toml:"paths"`
	// Commands are argv patterns (docs/manifest.md, "Command patterns"),
	// without path elements.
	Commands [][]CommandArg `json:"commands,omitempty" toml:"commands"`
	// URLs are URL globs matched as webhooks are (scheme and host exact,
	// path glob).
	URLs []string `json:"urls,omitempty" toml:"urls"`
}

// MaxApprovers bounds approvers: more is not a control anyone keeps up.
const MaxApprovers = 16

// EffectiveApprovers is approvers with its default (1) applied: how many
// distinct approver principals must approve one call of t.
func (t *Tool) EffectiveApprovers() int {
	if t.Approvers <= 0 {
		return 1
	}
	return t.Approvers
}

// whenMatcher is how an operation matches its calls against approval_when:
// the key of it the operation takes, and whether an allowed call (d, its
// decision) matches. Each operation's table line names one (Op.when); an
// operation without one takes no approval_when.
type whenMatcher struct {
	key   string
	match func(o *Op, t *Tool, ix *toolIndex, req *Request, d *Decision) bool
}

// whenIndex is a tool's approval_when compiled at load.
type whenIndex struct {
	paths    []glob
	patterns []cmdPattern
	urls     *netpolicy.Policy // nil when the urls did not compile: match all (fail closed)
}

func compileWhen(t *Tool) *whenIndex {
	w := t.ApprovalWhen
	if w == nil {
		return nil
	}
	wi := &whenIndex{}
	for _, g := range w.Paths {
		wi.paths = append(wi.paths, compileGlob(g))
	}
	for _, entry := range w.Commands {
		p, err := compilePattern(entry)
		if err != nil {
			p = cmdPattern{rest: &argMatcher{kind: argAny}, args: []argMatcher{{kind: argAny}}} // matches all: park
		}
		wi.patterns = append(wi.patterns, p)
	}
	if len(w.URLs) > 0 {
		wi.urls, _ = netpolicy.NewPolicy(netpolicy.Config{Webhooks: w.URLs, Schemes: t.Schemes})
	}
	return wi
}

// parks says whether an allowed call of t that needs a human waits for
// one: always, unless t has approval_when and the call matches none of
// it (then it runs without approval). The operation matches its own
// targets (Op.when); an operation that has none parks every call.
func (o *Op) parks(t *Tool, ix *toolIndex, req *Request, d *Decision) bool {
	if t.ApprovalWhen == nil || ix.when == nil || o.when == nil {
		return true
	}
	return o.when.match(o, t, ix, req, d)
}

// whenPaths matches a file tool's path targets: the path as requested,
// beneath each root it lies under, and as the kernel resolved it,
// beneath its root and every other root of the tool that contains it (a
// symlink named innocently may lead into deploy/), each against the
// globs as never matches them (the path and its ancestors; each name).
var whenPaths = &whenMatcher{key: "paths", match: func(o *Op, t *Tool, ix *toolIndex, req *Request, d *Decision) bool {
	globs := ix.when.paths
	for i := range o.Targets {
		tg := &o.Targets[i]
		if v := tg.Value(req.Args); v != nil {
			for _, m := range matchRoots(nil, ix, splitPath(*v, nil)) {
				if _, hit := neverMatchComps(globs, m.comps); hit {
					return true
				}
			}
		}
		var res *Resource
		switch {
		case len(o.Targets) == 1:
			res = d.Resource
		case i < len(d.Targets):
			res = d.Targets[i]
		}
		if res == nil || res.Outcome != OutcomeOK {
			continue
		}
		if _, hit := neverMatch(globs, res.Rel); hit {
			return true
		}
		if _, hit := globsOtherRoots(ix, globs, res.Root, res.Rel); hit {
			return true
		}
	}
	return false
}}

// whenCommands matches an execute call's argv (the tool's only command
// when the call gives none) against the argv patterns.
var whenCommands = &whenMatcher{key: "commands", match: func(o *Op, t *Tool, ix *toolIndex, req *Request, d *Decision) bool {
	ea, ok := argsOf[ExecArgs](req)
	if !ok {
		return true
	}
	argv := ea.Argv
	if argv == nil {
		if argv, ok = t.OnlyCommand(); !ok {
			return true
		}
	}
	noPaths := func(int, string, *argMatcher) bool { return true } // refused at load
	for i := range ix.when.patterns {
		if ix.when.patterns[i].match(argv, noPaths) {
			return true
		}
	}
	return false
}}

// whenURLs matches a post's URL against the URL globs, by the same pure
// function that matched it against webhooks.
var whenURLs = &whenMatcher{key: "urls", match: func(o *Op, t *Tool, ix *toolIndex, req *Request, d *Decision) bool {
	if ix.when.urls == nil || o.net == nil {
		return true
	}
	r, err := o.net(ix.when.urls, req.Args)
	return err == nil && r != nil
}}

// validateApprovalScale checks approvers and approval_when: approvers
// only where a call waits for a human, 1 to MaxApprovers; approval_when
// only with "approval": "human", and only its operation's key of it.
func validateApprovalScale(key string, t *Tool) error {
	waits := t.Approval == api.ApprovalHuman || t.Writes != nil && t.Writes.EffectiveCommit() == CommitApproval
	if t.Approvers != 0 {
		if t.Approvers < 1 || t.Approvers > MaxApprovers {
			return merr(key+".approvers", "is %d; use 1 to %d distinct approver principals (default 1)", t.Approvers, MaxApprovers)
		}
		if !waits {
			return merr(key+".approvers", "applies only with \"approval\": \"human\" or writes.commit \"approval\"; remove it or set approval")
		}
	}
	w := t.ApprovalWhen
	if w == nil {
		return nil
	}
	wk := key + ".approval_when"
	if t.Approval != api.ApprovalHuman {
		return merr(wk, "applies only with \"approval\": \"human\"; remove it or set approval")
	}
	o := LookupOp(t.Operation)
	if o == nil {
		return nil // validateTool names the operation
	}
	if o.when == nil {
		return merr(wk, "does not apply to %s tools (a fetch's redirects would reach what a URL glob names without being matched); remove it: every call of the tool waits for approval", t.Operation)
	}
	set := map[string]int{"paths": len(w.Paths), "commands": len(w.Commands), "urls": len(w.URLs)}
	for _, k := range []string{"paths", "commands", "urls"} {
		if k != o.when.key && set[k] > 0 {
			return merr(wk+"."+k, "does not apply to %s tools; use approval_when.%s", t.Operation, o.when.key)
		}
	}
	if set[o.when.key] == 0 {
		return merr(wk+"."+o.when.key, "missing or empty; list what makes a call wait for approval, or remove approval_when (every call waits)")
	}
	for i, g := range w.Paths {
		if err := validateGlob(g); err != nil {
			return merr(fmt.Sprintf("%s.paths[%d]", wk, i), "%q: %v", g, err)
		}
	}
	if len(w.Commands) > 0 {
		// The command pattern rules, on a tool of these patterns; a path
		// element needs a resolution the daemon makes only for the
		// tool's own commands, so it is refused here.
		shadow := &Tool{Commands: w.Commands}
		if err := validateCommands(wk, shadow); err != nil {
			return err
		}
		for i, entry := range w.Commands {
			for j := range entry {
				c := &entry[j]
				if c.Path != nil || c.Rest != nil && c.Rest.Path != nil {
					return merr(fmt.Sprintf("%s.commands[%d][%d]", wk, i, j), "a path element cannot say when a call waits (its argument is resolved only for the tool's commands); use a glob or regex element")
				}
			}
		}
	}
	if len(w.URLs) > 0 {
		if _, err := netpolicy.NewPolicy(netpolicy.Config{Webhooks: w.URLs, Schemes: t.Schemes}); err != nil {
			return merr(wk, "%s", strings.Replace(err.Error(), "webhooks[", "urls[", 1))
		}
	}
	return nil
}

// ApproverNames are the manifest's approver principals, sorted ("local"
// when it declares none: uid 0 approves).
func (m *Manifest) ApproverNames() []string {
	if m.Principals == nil {
		return []string{LocalPrincipal}
	}
	var out []string
	for _, n := range sortedKeys(m.Principals) {
		if m.Principals[n].Approver {
			out = append(out, n)
		}
	}
	return out
}

// validateApprovers checks that every call of a tool with approvers N
// could gather N approvals: nobody approves a call of its own principal,
// so a caller that is itself an approver has one fewer to ask. N greater
// than the approver principals, or than those left to a caller that is
// one of them, is a load error naming the tool and the caller.
func validateApprovers(m *Manifest) error {
	approvers := m.ApproverNames()
	for _, tn := range sortedKeys(m.Tools) {
		t := m.Tools[tn]
		if t.Approvers == 0 {
			continue // the default: warned at load where it is unreachable (SelfApprovalUnreachable)
		}
		key := "tools." + tn + ".approvers"
		n := t.Approvers
		if m.Principals == nil && n > 1 {
			return merr(key, "is %d; the manifest declares no principals, so only uid 0 approves: declare %d approver principals", n, n)
		}
		if n > len(approvers) {
			return merr(key, "is %d, but the manifest has %d approver principals (%s); declare more or lower it", n, len(approvers), strings.Join(approvers, ", "))
		}
		for _, p := range m.ApproversWhoMayCall(tn) {
			if m.Principals != nil && n > len(approvers)-1 {
				return merr(key, "is %d, but principal %s may call %s and is one of its %d approver principals: nobody approves a call of its own principal, so its calls could never gather %d approvals; declare another approver or take %s off the tool", n, p, tn, len(approvers), n, p)
			}
		}
	}
	return nil
}

// SelfApprovalUnreachable names, for each tool that needs one approval
// (the default), the approver principals that may call it while no other
// approver exists: their own calls of it can never be approved. A
// warning at load, not an error: manifests from before the rule had it.
func (m *Manifest) SelfApprovalUnreachable() map[string][]string {
	if m.Principals == nil {
		return nil // local: uid 0's calls are its own; other uids' are approvable
	}
	approvers := m.ApproverNames()
	out := map[string][]string{}
	for _, tn := range sortedKeys(m.Tools) {
		t := m.Tools[tn]
		waits := t.Approval == api.ApprovalHuman || t.Writes != nil && t.Writes.EffectiveCommit() == CommitApproval
		if !waits || t.Approvers > 1 {
			continue
		}
		for _, p := range m.ApproversWhoMayCall(tn) {
			if len(approvers) < 2 {
				out[tn] = append(out[tn], p)
			}
		}
	}
	return out
}

// SameApprover says whether an approver (name, uid) is the principal of
// a call made by (callPrincipal, callUID): it may not approve that call.
// Without declared principals every peer is "local", so the uid tells
// them apart (uid 0 approves other uids' calls, never its own).
func (m *Manifest) SameApprover(name string, uid uint32, callPrincipal string, callUID uint32) bool {
	if name != callPrincipal {
		return false
	}
	return m.Principals != nil || uid == callUID
}
