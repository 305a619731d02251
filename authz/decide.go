package authz

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/foldname"
)

// LocalPrincipal is the name every peer gets when the manifest declares no
// principals.
const LocalPrincipal = "local"

// Limits on an untrusted path, checked before the kernel sees it.
const (
	MaxPathBytes      = 4095 // PATH_MAX less the NUL
	MaxComponentBytes = 255  // NAME_MAX
)

// IsApprover says whether the named principal may approve calls and reload
// the manifest. Without declared principals only uid 0 is the approver.
func (m *Manifest) IsApprover(name string, uid uint32) bool {
	if m.Principals == nil {
		return name == LocalPrincipal && uid == 0
	}
	p := m.Principals[name]
	return p != nil && p.Approver
}

// MayCall says whether the named principal may call tool. The empty name
// (an unmapped peer) may call nothing.
func (m *Manifest) MayCall(name, tool string) bool {
	if _, ok := m.Tools[tool]; !ok || name == "" {
		return false
	}
	if m.Principals == nil {
		return name == LocalPrincipal
	}
	p := m.Principals[name]
	if p == nil {
		return false
	}
	return slices.Contains(p.Tools, "*") || slices.Contains(p.Tools, tool)
}

// ToolNamesAll returns every tool's name, sorted.
func (m *Manifest) ToolNamesAll() []string { return sortedKeys(m.Tools) }

// ApproversWhoMayCall names the approver principals that may call tool
// ("local" when the manifest declares none: uid 0 approves and calls).
func (m *Manifest) ApproversWhoMayCall(tool string) []string {
	if m.Principals == nil {
		return []string{LocalPrincipal + " (uid 0)"}
	}
	var out []string
	for _, n := range sortedKeys(m.Principals) {
		if m.Principals[n].Approver && m.MayCall(n, tool) {
			out = append(out, n)
		}
	}
	return out
}

// ToolNames returns the names of the tools the principal may call, sorted.
func (m *Manifest) ToolNames(principal string) []string {
	var out []string
	for _, n := range sortedKeys(m.Tools) {
		if m.MayCall(principal, n) {
			out = append(out, n)
		}
	}
	return out
}

// CheckPath is the lexical pre-check of an untrusted path (docs/design.md §1 step 3).
// It returns "" when the path may be handed to the resolver, else the reason.
func CheckPath(unsafePath string) api.Reason {
	switch {
	case unsafePath == "", len(unsafePath) > MaxPathBytes,
		strings.IndexByte(unsafePath, 0) >= 0, strings.HasPrefix(unsafePath, "/"):
		return api.ReasonInvalidPath
	}
	for _, c := range strings.Split(unsafePath, "/") {
		if len(c) > MaxComponentBytes {
			return api.ReasonInvalidPath
		}
	}
	return ""
}

// RootMatch is a root a request path lies under lexically, with the part of
// the path below it. Rel is handed unchanged to the kernel: ".." in it is
// resolved there, beneath the root, never cleaned away here, because after a
// symlink ".." does not mean what string cleaning thinks it means.
type RootMatch struct {
	Index int    // index into the tool's roots
	Root  string // the root as written, cleaned
	Rel   string // the rest of the path, "." for the root itself

	comps []string
}

// MatchRoots returns the roots whose components begin the path, in manifest
// order. Only empty and "." components are dropped before comparing, as the
// kernel ignores them too. A rest that climbs above the root by its ".."
// alone ("a/b/../../../x") is not under that root, whether or not a/b
// exists. A path that matches no root is outside_roots without the
// filesystem being consulted: no oracle outside the roots.
func MatchRoots(t *Tool, unsafePath string) []RootMatch {
	out := matchRoots(nil, t.index(), splitPath(unsafePath, nil))
	for i := range out {
		if len(out[i].comps) > 0 {
			out[i].Rel = strings.Join(out[i].comps, "/")
		}
	}
	return out
}

// matchRoots appends the matches to out; Rel is left "." (MatchRoots fills
// it), so that Decide, which needs only the components, allocates nothing.
func matchRoots(out []RootMatch, ix *toolIndex, comps []string) []RootMatch {
	for i, rc := range ix.roots {
		if len(rc) > len(comps) || !equalPrefix(rc, comps) {
			continue
		}
		rest := comps[len(rc):]
		if climbs(rest) {
			continue
		}
		out = append(out, RootMatch{Index: i, Root: ix.rootClean[i], Rel: ".", comps: rest})
	}
	return out
}

func equalPrefix(prefix, comps []string) bool {
	for i, c := range prefix {
		if comps[i] != c {
			return false
		}
	}
	return true
}

// climbs reports whether ".." components alone take the path above its
// start. Only a denial follows from it; what stays below is still the
// kernel's to resolve.
func climbs(comps []string) bool {
	depth := 0
	for _, c := range comps {
		if c == ".." {
			if depth--; depth < 0 {
				return true
			}
		} else {
			depth++
		}
	}
	return false
}

// splitPath splits p into its components, dropping empty and "." ones,
// appending to buf (pass a stack array's slice to avoid allocating).
func splitPath(p string, buf []string) []string {
	out := buf[:0]
	for c := range strings.SplitSeq(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// sameComps reports whether rel has exactly the components comps.
func sameComps(rel string, comps []string) bool {
	i := 0
	for c := range strings.SplitSeq(rel, "/") {
		if c == "" || c == "." {
			continue
		}
		if i >= len(comps) || comps[i] != c {
			return false
		}
		i++
	}
	return i == len(comps)
}

// Resolution outcomes, set by the daemon from what the kernel said.
const (
	OutcomeOK       = "ok"
	OutcomeEscapes  = "escapes"   // EXDEV, absolute or climbing symlink, magic link, loop
	OutcomeNotFound = "not_found" // ENOENT/ENOTDIR beneath the root
	OutcomeInvalid  = "invalid"   // ENAMETOOLONG and the like
	OutcomeError    = "error"     // anything else: fail closed
	// OutcomeRefused is a URL its tool's policy refused (NetTarget): its
	// host was never looked up, and the record keeps no resolution of it.
	OutcomeRefused = "refused"
)

// File kinds of a resolved resource: the one api.Kind type.
const (
	KindFile    = api.KindFile
	KindDir     = api.KindDir
	KindSymlink = api.KindSymlink
	KindFIFO    = api.KindFIFO
	KindSocket  = api.KindSocket
	KindDevice  = api.KindDevice
	KindOther   = api.KindOther
	KindAbsent  = api.KindAbsent
)

// Resource is what the resolver found for a path under one root. It is
// recorded in the audit so that replay can re-decide without the filesystem.
type Resource struct {
	Root int `json:"root"`
	// RootPath is the root as the manifest writes it: replay matches a
	// recorded resolution to a root of another manifest by it.
	RootPath string   `json:"root_path,omitempty"`
	Outcome  string   `json:"outcome"`
	Path     string   `json:"path,omitempty"` // absolute, as the kernel names the opened fd; a fetch's or post's URL
	Rel      string   `json:"rel,omitempty"`  // resolved path relative to the root
	Kind     api.Kind `json:"kind,omitempty"`
	// Links is a resolved regular file's link count when it is more
	// than one (else 0): a tool that refuses hard links (see
	// Tool.RefusesHardLinks) denies it.
	Links uint64 `json:"links,omitempty"`
	// Addrs is what a fetch's or post's host resolved to, looked up once:
	// the decision checks every address, and the request goes to the
	// first (docs/egress.md).
	Addrs []string `json:"addrs,omitempty"`
	// Net is a fetch's or post's URL as its tool's policy authorized it,
	// when the daemon resolved it (Op.NetTarget): what the decision checks
	// and the executor sends. Never recorded; nil in a resource read back
	// from a record, for which Decide authorizes the recorded URL itself.
	Net *NetTarget `json:"-"`
	// Arg is, for an execute's path element, the index in argv of the
	// argument resolved (beneath RootPath, a root of the element).
	Arg int `json:"arg,omitempty"`
}

// Request is an already-parsed, already-resolved call: what is common to
// every operation, the operation's own typed args, and what its targets
// resolved to.
type Request struct {
	Principal string // "" for a peer that maps to no principal
	Tool      string
	// Args are the operation's typed args (*ReadArgs, *WriteArgs, …);
	// nil when the tool is unknown. Only the operation's own file looks
	// inside: a type that is not its own is denied internal_error.
	Args OpArgs
	// ArgsError is set when the args fit the schema's types but not its
	// rules (a required key missing, both content forms given).
	ArgsError string
	// Approved: an approver approved this very call (after it was
	// pending). It is decided again, and approval no longer holds it.
	Approved bool
	// Resolved holds one list per target the operation declares
	// (Op.Targets, in order): for a path, one outcome per RootMatch of
	// it, in the same order; for a URL, its one lookup.
	Resolved [][]Resource
}

// target is what the request's target i resolved to (nil: nothing).
func (r *Request) target(i int) []Resource {
	if i < len(r.Resolved) {
		return r.Resolved[i]
	}
	return nil
}

// RecordResolved is what a decision record keeps of res, resolved for
// operation o's targets ("resolved"): for an operation of one target the
// list of its resolutions, as every record has kept it; for several, an
// object of them by target name. A URL's resolution keeps its query
// values by digest (RecordURL), like the args.
func (o *Op) RecordResolved(res [][]Resource) json.RawMessage {
	out := make([][]Resource, len(res))
	for i, r := range res {
		out[i] = r
		if i < len(o.Targets) && o.Targets[i].Resolve == ResolveNet {
			out[i] = nil
			for _, rs := range r {
				if rs.Outcome != OutcomeRefused { // never looked up
					rs.Path, rs.Net = RecordURL(rs.Path), nil
					out[i] = append(out[i], rs)
				}
			}
		}
	}
	var n int
	for _, r := range out {
		n += len(r)
	}
	if n == 0 {
		return nil
	}
	if len(o.Targets) <= 1 {
		return mustJSON(out[0])
	}
	byName := make(map[string][]Resource, len(o.Targets))
	for i, tg := range o.Targets {
		if i < len(out) && len(out[i]) > 0 {
			byName[tg.Name] = out[i]
		}
	}
	return mustJSON(byName)
}

// ResolvedFromRecord reads back what RecordResolved kept: one list per
// target of o, in order (nil where none was recorded).
func (o *Op) ResolvedFromRecord(rec json.RawMessage) [][]Resource {
	out := make([][]Resource, max(len(o.Targets), 1))
	if len(rec) == 0 {
		return out
	}
	var flat []Resource
	if json.Unmarshal(rec, &flat) == nil {
		out[0] = flat
		return out
	}
	var byName map[string][]Resource
	if json.Unmarshal(rec, &byName) == nil {
		for i, tg := range o.Targets {
			out[i] = byName[tg.Name]
		}
	}
	return out
}

// Decision is the outcome of Decide. The zero value denies.
type Decision struct {
	// Verdict is allow, deny or pending; the zero value ("") denies.
	Verdict  api.Verdict
	Reason   api.Reason
	Rule     string
	Resource *Resource // the resource that decided, when one did
	// Targets is, for an operation of several targets, the resolution
	// that decided each, in the order of Op.Targets (Resource is the
	// first's); nil for one of one target, whose Resource it is.
	Targets []*Resource
}

// Allowed reports whether the call may run now.
func (d Decision) Allowed() bool { return d.Verdict == api.VerdictAllow }

// Pending reports whether the call must wait for a human
// (approval_required).
func (d Decision) Pending() bool { return d.Verdict == api.VerdictPending }

// WireVerdict is the verdict for the wire and the ledger: the zero value
// is a denial.
func (d Decision) WireVerdict() api.Verdict {
	if d.Verdict == "" {
		return api.VerdictDeny
	}
	return d.Verdict
}

func deny(reason api.Reason, rule string) Decision {
	return Decision{Verdict: api.VerdictDeny, Reason: reason, Rule: rule}
}

func allow(rule string) Decision {
	return Decision{Verdict: api.VerdictAllow, Reason: api.ReasonAllowed, Rule: rule}
}

// Decide is the pure authorization function: default deny, a stable reason
// code and the rule that matched. It never touches the filesystem; the
// caller resolves paths first (see MatchRoots) and passes the outcomes in.
func Decide(m *Manifest, req *Request) Decision {
	if m == nil || req == nil {
		return deny(api.ReasonInternalError, "")
	}
	t, ok := m.Tools[req.Tool]
	if !ok {
		return deny(api.ReasonUnknownTool, "")
	}
	ix := t.index()
	tkey := ix.key
	if !m.MayCall(req.Principal, req.Tool) {
		if req.Principal == "" {
			return deny(api.ReasonPrincipalNotAllowed, "principals")
		}
		return deny(api.ReasonPrincipalNotAllowed, "principals."+req.Principal+".tools")
	}
	if req.ArgsError != "" {
		return deny(api.ReasonInvalidArgs, tkey)
	}
	o := LookupOp(t.Operation)
	if o == nil {
		return deny(api.ReasonInternalError, tkey)
	}
	d := o.decide(t, ix, req)
	if !d.Allowed() {
		return d
	}
	if t.Approval == api.ApprovalHuman {
		if req.Approved {
			return d // the approver's record says who; the rule stays the match
		}
		if !o.parks(t, ix, req, &d) {
			return d // approval_when matches nothing of this call: it runs without one
		}
		d.Verdict = api.VerdictPending
		d.Reason = api.ReasonApprovalRequired
		d.Rule = tkey + ".approval"
	}
	return d
}

// decidePath decides a file tool's call: the path's lexical checks, the
// roots it lies under, never (as requested and as resolved), then kind
// (the operation's check of what the kernel resolved).
func decidePath(ix *toolIndex, path *string, resolved []Resource, kind func(api.Kind, string) Decision) Decision {
	tkey := ix.key
	if path == nil {
		return deny(api.ReasonInvalidArgs, tkey)
	}
	if r := CheckPath(*path); r != "" {
		return deny(r, tkey)
	}
	var compBuf [32]string
	var matchBuf [8]RootMatch
	matches := matchRoots(matchBuf[:0], ix, splitPath(*path, compBuf[:0]))
	if len(matches) == 0 {
		return deny(api.ReasonOutsideRoots, tkey+".roots")
	}
	// never, on the path as requested: denied before the kernel is asked,
	// so a hidden name is never probed for existence.
	for _, m := range matches {
		if gi, hit := neverMatchComps(ix.never, m.comps); hit {
			return deny(api.ReasonNeverListed, ix.neverKeys[gi])
		}
	}
	if len(resolved) != len(matches) {
		// The caller did not resolve what it had to: fail closed.
		return deny(api.ReasonInternalError, tkey)
	}
	// The first root that resolves decides. Otherwise report the most
	// specific failure among roots the path lay under.
	var best Decision
	bestRank := -1
	for i := range resolved {
		res := &resolved[i]
		rootKey := ix.rootKeys[matches[i].Index]
		if res.Outcome != OutcomeOK {
			d, rank := outcomeDenial(res.Outcome, rootKey)
			if rank > bestRank {
				best, bestRank = d, rank
				best.Resource = res
			}
			continue
		}
		// never, on what the kernel resolved (a symlink named innocently
		// may lead to .env): as a path from the root and by every
		// component's name.
		if !sameComps(res.Rel, matches[i].comps) {
			if gi, hit := neverMatch(ix.never, res.Rel); hit {
				d := deny(api.ReasonNeverListed, ix.neverKeys[gi])
				d.Resource = res
				return d
			}
		}
		if gi, hit := neverOtherRoots(ix, matches[i].Index, res.Rel); hit {
			d := deny(api.ReasonNeverListed, ix.neverKeys[gi])
			d.Resource = res
			return d
		}
		if ix.refuseLinks && res.Kind == KindFile && res.Links > 1 {
			// Another name of this file may be never-listed.
			d := deny(api.ReasonUnsupportedFileType, ix.linksKey)
			d.Resource = res
			return d
		}
		d := kind(res.Kind, rootKey)
		d.Resource = res
		return d
	}
	return best
}

// outcomeDenial maps a resolution failure to its reason and a rank: when a
// path lies under several roots, the most specific failure is reported.
func outcomeDenial(outcome, rootKey string) (Decision, int) {
	switch outcome {
	case OutcomeNotFound:
		return deny(api.ReasonNotFound, rootKey), 3
	case OutcomeInvalid:
		return deny(api.ReasonInvalidPath, rootKey), 2
	case OutcomeEscapes:
		return deny(api.ReasonOutsideRoots, rootKey), 1
	}
	return deny(api.ReasonInternalError, rootKey), 0
}

// NeverMatch reports whether a path relative to a root is hidden by the
// tool's never globs, for list filtering.
func NeverMatch(t *Tool, rel string) bool {
	_, hit := neverMatch(t.index().never, rel)
	return hit
}

// NeverMatchResolved reports whether a path that the kernel resolved
// beneath the tool's root number root (rel, as the kernel names it) is
// hidden: as a path from that root, or from any other root of the tool it
// also lies beneath.
func NeverMatchResolved(t *Tool, root int, rel string) bool {
	ix := t.index()
	if _, hit := neverMatch(ix.never, rel); hit {
		return true
	}
	_, hit := neverOtherRoots(ix, root, rel)
	return hit
}

// neverOtherRoots checks a path resolved beneath root i against never as a
// path from every other root of the tool that contains it. With nested
// roots ("ws" and "ws/src", never "private/**") a file is hidden by its
// path from each: ws/src/private/k stays hidden when it is reached beneath
// "ws" (as "ws/src/../src/private/k", or through a symlink in ws), not
// only when the request is spelled beneath "ws/src". Roots are compared
// lexically, as the manifest writes them, each name also as a
// case-insensitive disk compares it (the kernel may name "ws/SRC").
func neverOtherRoots(ix *toolIndex, i int, rel string) (int, bool) {
	return globsOtherRoots(ix, ix.never, i, rel)
}

// globsOtherRoots is neverOtherRoots for any globs (approval_when's).
func globsOtherRoots(ix *toolIndex, globs []glob, i int, rel string) (int, bool) {
	if len(globs) == 0 || len(ix.roots) < 2 || i < 0 || i >= len(ix.roots) {
		return 0, false
	}
	var buf [32]string
	full := append(append(buf[:0], ix.roots[i]...), splitPath(rel, nil)...)
	for j, rc := range ix.roots {
		if j == i || len(rc) > len(full) || !slices.EqualFunc(rc, full[:len(rc)], foldname.Equal) {
			continue
		}
		if gi, hit := neverMatchComps(globs, full[len(rc):]); hit {
			return gi, true
		}
	}
	return 0, false
}

func neverMatch(globs []glob, rel string) (int, bool) {
	if len(globs) == 0 {
		return 0, false
	}
	var buf [32]string
	return neverMatchComps(globs, splitPath(rel, buf[:0]))
}

// neverMatchComps checks a path and each of its ancestors: a glob without
// '/' against the component's name, one with '/' against the path from the
// root ('**' spans any number of components). Hiding a directory hides all
// below it. Each component is matched as written, as its fold and as its
// key (foldname), so that a case-insensitive disk cannot open a hidden name
// under another spelling (".ENV", "ID.PEM", ".env."); folding allocates
// only for names that are not already lower-case ASCII.
func neverMatchComps(globs []glob, comps []string) (int, bool) {
	if len(globs) == 0 {
		return 0, false
	}
	var foldBuf, keyBuf [32]string
	folds, keys := foldBuf[:0], keyBuf[:0]
	for _, c := range comps {
		f := foldname.Fold(c)
		folds, keys = append(folds, f), append(keys, foldname.TrimTrailing(f))
	}
	for i := range comps {
		for gi := range globs {
			g := &globs[gi]
			if !g.slash {
				if g.name.match(comps[i], folds[i], keys[i]) {
					return gi, true
				}
				continue
			}
			if globMatch(g.comps, comps[:i+1], folds[:i+1], keys[:i+1]) {
				return gi, true
			}
		}
	}
	return 0, false
}

// globMatch matches path components (as written, folded and as keys)
// against pattern components, where "**" matches zero or more components.
func globMatch(pat []namePat, comps, folds, keys []string) bool {
	for len(pat) > 0 {
		if pat[0].kind == patDeep {
			for k := 0; k <= len(comps); k++ {
				if globMatch(pat[1:], comps[k:], folds[k:], keys[k:]) {
					return true
				}
			}
			return false
		}
		if len(comps) == 0 || !pat[0].match(comps[0], folds[0], keys[0]) {
			return false
		}
		pat, comps, folds, keys = pat[1:], comps[1:], folds[1:], keys[1:]
	}
	return len(comps) == 0
}

// argsOf is req's args as the operation whose args are an *A: the zero
// args when the request has none (the decision then says what is
// missing), ok false when they are another operation's (fail closed).
func argsOf[A any, P interface {
	*A
	OpArgs
}](req *Request) (P, bool) {
	if req.Args == nil {
		return P(new(A)), true
	}
	a, ok := req.Args.(P)
	return a, ok && a != nil
}
