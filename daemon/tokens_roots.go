//go:build linux

package daemon

import (
	"errors"
	"strings"

	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/securefs"
)

// A token's roots narrow its file tools (docs/tokens.md): a path must
// resolve beneath one of the tool's roots, as always, AND beneath one of
// the token's roots, by the kernel, not by comparing strings of the
// unresolved path. For each path target:
//
//  1. lexically, the path must lie under a token root (its components
//     begin with the root's, and what follows does not climb above it by
//     ".." alone); a path that does not is outside_roots without the file
//     system being consulted, as for a tool's roots;
//  2. the token root is opened beneath the tool's held root fd (openat2,
//     RESOLVE_BENEATH), and the rest of the path is resolved beneath that
//     fd: a ".." or a symlink that leaves the token root is an escape
//     (EXDEV), whether or not what it would reach exists, so a token
//     holder learns nothing of the tool's root outside its own;
//  3. what the tool's resolution opened (the fd the executor acts on)
//     must lie beneath the token root as the kernel names both fds now.
//
// A resolution that fails 2 or 3 becomes an escape: authz then decides
// outside_roots, and the ledger's resolved entry says "escapes", so that
// replay decides it the same.

// resolvePathNarrowed is resolvePath for a call whose token may narrow
// its roots.
func (c *call) resolvePathNarrowed(tg *heldTarget, how authz.Resolve, unsafePath string) []authz.Resource {
	if c.tok == nil || c.tok.g == nil || len(c.tok.g.roots) == 0 {
		return c.resolvePath(tg, how, unsafePath)
	}
	if authz.CheckPath(unsafePath) != "" {
		return nil // authz denies it: invalid_path
	}
	under := authz.MatchRoots(&authz.Tool{Roots: c.tok.g.roots}, unsafePath)
	if len(under) == 0 {
		return c.escapesEverywhere(unsafePath)
	}
	out := c.resolvePath(tg, how, unsafePath)
	for i := range out {
		if !c.beneathTokenRoot(under, how, &out[i]) {
			out[i] = authz.Resource{Root: out[i].Root, RootPath: out[i].RootPath, Outcome: authz.OutcomeEscapes}
		}
	}
	return out
}

// escapesEverywhere is the resolution of a path outside every token root:
// an escape beneath each tool root it lies under, decided outside_roots.
func (c *call) escapesEverywhere(unsafePath string) []authz.Resource {
	var out []authz.Resource
	for _, m := range authz.MatchRoots(c.tool, unsafePath) {
		out = append(out, authz.Resource{Root: m.Index, RootPath: m.Root, Outcome: authz.OutcomeEscapes})
	}
	return out
}

// beneathTokenRoot says whether res, one resolution of the path beneath a
// tool root, is beneath one of the token roots the path lies under
// (steps 2 and 3 above).
func (c *call) beneathTokenRoot(under []authz.RootMatch, how authz.Resolve, res *authz.Resource) bool {
	for _, u := range under {
		troot := c.openTokenRoot(u.Root)
		if troot == nil {
			continue
		}
		ok := c.checkBeneath(troot, u.Rel, how, res)
		troot.Close()
		if ok {
			return true
		}
	}
	return false
}

// openTokenRoot opens a token root (relative to base) beneath the held fd
// of a root of the call's tool it lies under; nil when it lies under none
// now (a reload moved the tool's roots) or does not resolve to a
// directory there.
func (c *call) openTokenRoot(tokenRoot string) *securefs.Root {
	roots := c.p.roots[c.req.Tool]
	for _, m := range authz.MatchRoots(c.tool, tokenRoot) {
		if m.Index >= len(roots) || roots[m.Index] == nil {
			continue
		}
		r, err := roots[m.Index].OpenRootBeneath(m.Rel)
		if err == nil {
			return r
		}
	}
	return nil
}

// checkBeneath resolves rel beneath the token root as the call's
// operation resolves its target, and checks res against it.
func (c *call) checkBeneath(troot *securefs.Root, rel string, how authz.Resolve, res *authz.Resource) bool {
	var err error
	if how == authz.ResolveParent {
		var pp *fileop.Parent
		if pp, err = fileop.ResolveParent(troot, rel); err == nil {
			pp.Close()
		}
	} else {
		var h *securefs.Handle
		if h, err = troot.Resolve(rel); err == nil {
			h.Close()
		}
	}
	if errors.Is(err, securefs.ErrPathEscapes) {
		return false
	}
	if res.Outcome != authz.OutcomeOK {
		// Not opened beneath the tool's root either (not found, ...):
		// that outcome stands, and says nothing outside the token root.
		return true
	}
	if err != nil {
		return false // opened beneath the tool root, not beneath the token root: fail closed
	}
	tp, perr := troot.Path()
	return perr == nil && res.Path != "" && pathBeneath(tp, res.Path)
}

// pathBeneath says whether p is root or lies beneath it, both absolute
// paths as the kernel names fds.
func pathBeneath(root, p string) bool {
	if p == root || root == "/" {
		return strings.HasPrefix(p, "/")
	}
	return len(p) > len(root) && p[len(root)] == '/' && p[:len(root)] == root
}
