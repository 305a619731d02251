//go:build linux

package daemon

import (
	"errors"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/securefs"
)

// resolve is docs/design.md §1 step 3. It runs only for a call that could be
// allowed: the tool exists, the principal may call it, the args are sound
// and the path passes the lexical checks; then the path is resolved by the
// kernel beneath each root it lies under.
func (c *call) resolve() {
	t := c.tool
	if t == nil || c.op == nil || c.op.Resolve == authz.ResolveNone || c.areq.ArgsError != "" ||
		!c.p.m.MayCall(c.areq.Principal, c.req.Tool) {
		return
	}
	if c.op.Resolve == authz.ResolveNet {
		c.resolveNet()
		return
	}
	if c.areq.Path == nil || authz.CheckPath(*c.areq.Path) != "" {
		return
	}
	matches := authz.MatchRoots(t, *c.areq.Path)
	for _, m := range matches {
		if authz.NeverMatch(t, m.Rel) {
			return // denied as requested; the kernel is not asked
		}
	}
	roots := c.p.roots[c.req.Tool]
	for _, m := range matches {
		res := authz.Resource{Root: m.Index, RootPath: m.Root}
		root := roots[m.Index]
		if root == nil {
			res.Outcome = authz.OutcomeNotFound
			c.areq.Resolved = append(c.areq.Resolved, res)
			continue
		}
		var err error
		if c.op.Resolve == authz.ResolveParent {
			err = c.resolveParent(root, m, &res)
		} else {
			err = c.resolveExisting(root, m, &res)
		}
		switch {
		case err == nil:
		case errors.Is(err, errMisplaced):
			res.Outcome = authz.OutcomeError
		case errors.Is(err, securefs.ErrPathEscapes):
			res.Outcome = authz.OutcomeEscapes
		case errors.Is(err, securefs.ErrNotExist):
			res.Outcome = authz.OutcomeNotFound
		case errors.Is(err, securefs.ErrInvalidPath):
			res.Outcome = authz.OutcomeInvalid
		default:
			c.d.log.Error("resolve failed", "err", err, "tool", c.req.Tool)
			res.Outcome = authz.OutcomeError
		}
		c.areq.Resolved = append(c.areq.Resolved, res)
	}
}

var errMisplaced = errors.New("resolved fd is not where expected")

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
func (c *call) resolveExisting(root *securefs.Root, m authz.RootMatch, res *authz.Resource) error {
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
	c.handles[m.Index] = h
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
	for _, h := range c.handles {
		h.Close()
	}
	c.handles = nil
	c.closeParents()
}
