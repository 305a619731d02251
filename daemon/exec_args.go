//go:build linux

package daemon

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/securefs"
)

// argRoots are what an execute tool's path elements ({"path": [roots…]},
// authz/op_execute_pattern.go) resolve a call's arguments beneath: each
// root opened beneath base when the manifest loads and held, so that an
// argument is resolved with openat2 beneath the root's fd
// (RESOLVE_BENEATH: "..", absolute symlinks and symlinks that climb out
// are refused by the kernel), never by a path looked up again.
type argRoots struct {
	base  string                    // base as the kernel names it
	cwd   string                    // the command's working directory, as the container sees it
	roots map[string]*securefs.Root // by the root as written, cleaned; nil: missing at load
}

// open opens the roots of t's path elements beneath base. A root that
// does not exist resolves every argument beneath it to not_found (its
// elements match nothing) until a reload finds it, as a file tool's.
func (a *argRoots) open(key string, t *authz.Tool, base *securefs.Root, basePath, cwd string) error {
	a.base, a.cwd = basePath, cwd
	for i, entry := range t.Commands {
		for j := range entry {
			el := &entry[j]
			if el.Rest != nil {
				el = el.Rest
			}
			for _, r := range el.Path {
				r = filepath.Clean(r)
				if _, done := a.roots[r]; done {
					continue
				}
				if a.roots == nil {
					a.roots = map[string]*securefs.Root{}
				}
				root, err := base.OpenRootBeneath(r)
				switch {
				case err == nil:
					a.roots[r] = root
				case errors.Is(err, securefs.ErrNotExist):
					a.roots[r] = nil
				default:
					return fmt.Errorf("manifest: %s.commands[%d][%d]: path root %q: %w", key, i, j, r, err)
				}
			}
		}
	}
	return nil
}

func (a *argRoots) close() {
	for r, root := range a.roots {
		if root != nil {
			root.Close()
		}
		delete(a.roots, r)
	}
}

// resolveArgs resolves, for an execute call, each argument a path
// element of its tool's commands could match (authz.ArgPaths: only for
// the entries the argv matches by their strings, at most
// authz.MaxArgPaths) beneath the element's root. The handle is closed at
// once: the command opens the file itself, in its container, which sees
// the same files at the same paths, read-only (docs/sandbox.md).
func (c *call) resolveArgs() []authz.Resource {
	et := c.p.exec[c.req.Tool]
	ea, ok := c.areq.Args.(*authz.ExecArgs)
	if et == nil || !ok || ea.Argv == nil || len(et.args.roots) == 0 {
		return nil
	}
	var out []authz.Resource
	for _, ap := range authz.ArgPaths(c.tool, ea.Argv, et.args.base, et.args.cwd) {
		res := authz.Resource{Arg: ap.Arg, RootPath: ap.Root, Outcome: authz.OutcomeNotFound}
		if root := et.args.roots[ap.Root]; root != nil {
			res.Outcome = c.resolveArg(root, ap.Rel, &res)
		}
		out = append(out, res)
	}
	return out
}

// resolveArg resolves rel beneath root, filling res; the outcome.
func (c *call) resolveArg(root *securefs.Root, rel string, res *authz.Resource) string {
	h, err := root.Resolve(rel)
	switch {
	case err == nil:
	case errors.Is(err, securefs.ErrPathEscapes):
		return authz.OutcomeEscapes
	case errors.Is(err, securefs.ErrNotExist):
		return authz.OutcomeNotFound
	case errors.Is(err, securefs.ErrInvalidPath):
		return authz.OutcomeInvalid
	default:
		c.d.log.Error("resolve argument failed", "err", err, "tool", c.req.Tool)
		return authz.OutcomeError
	}
	defer h.Close()
	res.Kind = h.Kind
	if err := relBeneath(root, h, res); err != nil {
		c.d.log.Error("resolved argument not where expected; denying", "err", err, "tool", c.req.Tool)
		return authz.OutcomeError
	}
	return authz.OutcomeOK
}
