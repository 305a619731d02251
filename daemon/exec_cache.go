//go:build linux

package daemon

import (
	"github.com/sluicehq/sluice/sandbox"
)

// Caches (docs/design.md §4, `cache`): each container path an execute
// tool lists is backed, read-write, by a cache of its own per principal: a
// size-capped tmpfs (sandbox.Cache, cache_mb) that no host path names,
// kept across that principal's calls while sluiced runs and never part of
// a changeset. A principal never sees another's cache. Because a pooled
// box is made before the call's principal is known, a tool with caches
// keeps no pool: each call makes its box (with the principal's caches) as
// its decision syncs.

// createOptions is what a box for this call needs beside its tool's
// spec: the principal's caches.
func (c *call) createOptions(et *execTool) (sandbox.CreateOptions, error) {
	var opt sandbox.CreateOptions
	if et == nil || len(et.cache) == 0 {
		return opt, nil
	}
	max := c.tool.EffectiveCacheMB() << 20
	for _, dest := range et.cache {
		cc, err := c.d.caches.get(cacheKey{c.req.Tool, c.areq.Principal, dest}, max)
		if err != nil {
			return opt, err
		}
		opt.Caches = append(opt.Caches, sandbox.CacheBind{Dest: dest, Cache: cc})
	}
	return opt, nil
}
