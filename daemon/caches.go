//go:build linux

package daemon

import (
	"net/http"
	"sync"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/sandbox"
)

// The daemon's execute caches (docs/design.md §4, `cache`; exec_cache.go
// binds them into a call's box): one size-capped tmpfs per (tool,
// principal, container path), kept while sluiced runs, dropped by
// POST /v1/caches/{tool}/clear (`sluice cache clear TOOL`).

type cacheKey struct{ tool, principal, dest string }

type cacheSet struct {
	mu sync.Mutex
	m  map[cacheKey]*sandbox.Cache
}

func newCacheSet() *cacheSet { return &cacheSet{m: map[cacheKey]*sandbox.Cache{}} }

// get is the cache for k, made (maxBytes) on first need.
func (s *cacheSet) get(k cacheKey, maxBytes int64) (*sandbox.Cache, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.m[k]; c != nil {
		return c, nil
	}
	c, err := sandbox.NewCache(maxBytes)
	if err != nil {
		return nil, err
	}
	s.m[k] = c
	return c, nil
}

// clear drops tool's caches (of one principal, or of all when principal
// is ""): a box made later gets an empty one. A box running now keeps the
// one it has until it ends (its mount holds it). It returns how many
// caches it dropped.
func (s *cacheSet) clear(tool, principal string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, c := range s.m {
		if k.tool == tool && (principal == "" || k.principal == principal) {
			c.Close()
			delete(s.m, k)
			n++
		}
	}
	return n
}

func (s *cacheSet) closeAll() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.m {
		c.Close()
		delete(s.m, k)
	}
}

// handleCacheClear is POST /v1/caches/{tool}/clear: a principal clears
// its own caches of a tool it may call; an approver clears every
// principal's.
func (d *Daemon) handleCacheClear(w http.ResponseWriter, _ *http.Request, peer Peer, tool string) {
	p := d.acquire()
	defer p.release()
	name, _ := p.m.Identify(callerOf(peer))
	approver := p.m.IsApprover(name, peer.UID)
	t := p.m.Tools[tool]
	if t == nil || (!approver && !p.m.MayCall(name, tool)) {
		writeError(w, http.StatusNotFound, api.ErrNotFound, "no tool "+tool+" that you may call")
		return
	}
	if len(t.Cache) == 0 {
		writeError(w, http.StatusBadRequest, api.ErrBadRequest, "tool "+tool+" has no cache")
		return
	}
	who := name
	if approver {
		who = ""
	}
	n := d.caches.clear(tool, who)
	writeJSON(w, http.StatusOK, api.CacheCleared{Tool: tool, Cleared: n, AllPrincipals: approver})
}
