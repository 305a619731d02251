//go:build linux

package daemon

import (
	"errors"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/securefs"
)

// resolve is docs/design.md §1 step 3. It runs only for a call that could be
// allowed: the tool exists, the principal may call it and the args are
// sound. Then each target the operation declares (authz.Op.Targets) is
// resolved, into its own list of the request's Resolved: a path that
// passes the lexical checks by the kernel beneath each root it lies
// under, a URL by one lookup of its host.
func (c *call) resolve() {
	if c.tool == nil || c.op == nil || len(c.op.Targets) == 0 || c.areq.ArgsError != "" ||
		!c.p.m.MayCall(c.areq.Principal, c.req.Tool) || c.tokenRefuses() {
		return
	}
	c.areq.Resolved = make([][]authz.Resource, len(c.op.Targets))
	for i := range c.op.Targets {
		tg := &c.op.Targets[i]
		if tg.Resolve == authz.ResolveArgs {
			c.areq.Resolved[i] = c.resolveArgs()
			continue
		}
		v := tg.Value(c.areq.Args)
		if v == nil {
			continue // authz denies it: a required arg is missing
		}
		if tg.Resolve == authz.ResolveNet {
			c.areq.Resolved[i] = c.resolveNet()
			continue
		}
		c.areq.Resolved[i] = c.resolvePathNarrowed(c.target(i), tg.Resolve, *v)
	}
}

// resolvePath resolves one path target beneath each root of the tool it
// lies under, holding what it resolved in tg for the executor.
func (c *call) resolvePath(tg *heldTarget, how authz.Resolve, unsafePath string) []authz.Resource {
	t := c.tool
	if authz.CheckPath(unsafePath) != "" {
		return nil
	}
	matches := authz.MatchRoots(t, unsafePath)
	for _, m := range matches {
		if authz.NeverMatch(t, m.Rel) {
			return nil // denied as requested; the kernel is not asked
		}
	}
	var out []authz.Resource
	roots := c.p.roots[c.req.Tool]
	for _, m := range matches {
		res := authz.Resource{Root: m.Index, RootPath: m.Root}
		root := roots[m.Index]
		if root == nil {
			res.Outcome = authz.OutcomeNotFound
			out = append(out, res)
			continue
		}
		var err error
		if how == authz.ResolveParent {
			err = c.resolveParent(tg, root, m, &res)
		} else {
			err = c.resolveExisting(tg, root, m, &res)
		}
		if err != nil {
			var known bool
			if res.Outcome, known = outcomeOf(err); !known {
				c.d.log.Error("resolve failed", "err", err, "tool", c.req.Tool)
			}
		}
		out = append(out, res)
	}
	return out
}

var errMisplaced = errors.New("resolved fd is not where expected")

// outcomeOf is the resolution outcome an error from resolving a path
// beneath a root stands for; known is false for an unexpected error
// (OutcomeError, which the caller logs).
func outcomeOf(err error) (outcome string, known bool) {
	switch {
	case errors.Is(err, errMisplaced):
		return authz.OutcomeError, true
	case errors.Is(err, securefs.ErrPathEscapes):
		return authz.OutcomeEscapes, true
	case errors.Is(err, securefs.ErrNotExist):
		return authz.OutcomeNotFound, true
	case errors.Is(err, securefs.ErrInvalidPath):
		return authz.OutcomeInvalid, true
	}
	return authz.OutcomeError, false
}

// links is what a resource records of a link count: a regular file's,
// when it has other names (see authz.Tool.RefusesHardLinks).
func links(kind api.Kind, nlink uint64) uint64 {
	if kind == securefs.KindFile && nlink > 1 {
		return nlink
	}
	return 0
}

// resolveExisting resolves the whole path (read, list); the handle is kept
// for the executor, which acts on it and never on the path.
func (c *call) resolveExisting(tg *heldTarget, root *securefs.Root, m authz.RootMatch, res *authz.Resource) error {
	h, err := root.Resolve(m.Rel)
	if err != nil {
		return err
	}
	res.Outcome, res.Kind = authz.OutcomeOK, h.Kind
	res.Links = links(h.Kind, uint64(h.Stat.Nlink))
	if err := relBeneath(root, h, res); err != nil {
		c.d.log.Error("resolved fd not where expected; denying", "err", err, "call_tool", c.req.Tool)
		h.Close()
		return errMisplaced
	}
	if tg.handles == nil {
		tg.handles = map[int]*securefs.Handle{}
	}
	tg.handles[m.Index] = h
	return nil
}

// relBeneath fills the resource's absolute path and its path relative to
// the root, both as the kernel names the fds now.
func relBeneath(root *securefs.Root, h *securefs.Handle, res *authz.Resource) error {
	if h.File() == nil {
		return nil // fallback resolver: a socket it could not open has no fd to name
	}
	abs, rel, err := root.Locate(h)
	if err != nil {
		return err
	}
	res.Path, res.Rel = abs, rel
	return nil
}

func (c *call) closeHandles() {
	for i := range c.targets {
		tg := &c.targets[i]
		for _, h := range tg.handles {
			h.Close()
		}
		tg.handles = nil
		tg.closeParents()
	}
	c.targets = nil
}
