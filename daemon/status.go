//go:build linux

package daemon

import (
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/api"
)

// GET /v1/status and GET /v1/tasks: what the daemon is doing now, for an
// operator (sluice status, sluice tasks list). An approver sees every
// principal's calls, approvals, denials and tasks, and the pools; any other
// principal only its own, so that no principal learns what another's agent
// is doing (which tools, which tasks, how often it is denied). A peer that
// maps to no principal owns nothing and gets 403.

// denialWindow is how far back GET /v1/status counts denials, in
// denialStep steps: a denial counts for between 290 and 300 seconds.
const (
	denialStep  = 10 // seconds
	denialSlots = 30 // 30 steps of 10 s: 5 minutes
)

// denialLog counts recent denials by (principal, reason) in 10-second
// buckets over the last 5 minutes. Its size is bounded by the manifest's
// principals times the stable reason codes, whatever the call rate. The
// zero value is ready.
type denialLog struct {
	mu    sync.Mutex
	slots [denialSlots]denialSlot
}

type denialSlot struct {
	step int64 // unix seconds / denialStep
	n    map[denialKey]int
}

type denialKey struct {
	principal string
	reason    api.Reason
}

func (l *denialLog) add(now time.Time, principal string, reason api.Reason) {
	step := now.Unix() / denialStep
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.slots[step%denialSlots]
	if s.step != step || s.n == nil {
		s.step, s.n = step, map[denialKey]int{}
	}
	s.n[denialKey{principal, reason}]++
}

// counts sums the denials of the window by reason, of one principal, or
// of all when all.
func (l *denialLog) counts(now time.Time, principal string, all bool) api.StatusDenials {
	step := now.Unix() / denialStep
	out := api.StatusDenials{WindowS: denialStep * denialSlots, ByReason: map[string]int{}}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.slots {
		s := &l.slots[i]
		if s.n == nil || step-s.step >= denialSlots || s.step > step {
			continue
		}
		for k, n := range s.n {
			if all || k.principal == principal {
				out.ByReason[string(k.reason)] += n
				out.Total += n
			}
		}
	}
	return out
}

// viewer is who asks for status: its principal name and whether it sees
// everything. ok is false (403 sent) for a peer that maps to no principal.
func (d *Daemon) viewer(w http.ResponseWriter, peer Peer) (name, policyVersion string, all, ok bool) {
	p := d.acquire()
	defer p.release()
	name, _ = p.m.Identify(callerOf(peer))
	all = p.m.IsApprover(name, peer.UID)
	if name == "" && !all {
		writeError(w, http.StatusForbidden, api.ErrForbidden,
			"uid "+strconv.FormatUint(uint64(peer.UID), 10)+" maps to no principal of the manifest: it has no calls to show")
		return "", "", false, false
	}
	return name, p.m.Version, all, true
}

// handleStatus is GET /v1/status.
func (d *Daemon) handleStatus(w http.ResponseWriter, r *http.Request, peer Peer) {
	name, version, all, ok := d.viewer(w, peer)
	if !ok {
		return
	}
	now := time.Now()
	st := api.Status{Version: api.Version, Revision: api.Revision(), PolicyVersion: version, Scope: "own",
		Principal: name, Calls: []api.StatusCall{}, Audit: "ok"}
	if all {
		st.Scope = "all"
	}
	if d.ledger.Health() != nil {
		st.Audit = "degraded"
	}
	parkedOf := map[string]string{} // call id -> approval id
	var oldest time.Time
	for _, pk := range d.approvals.list() {
		if !all && pk.shown.principal != name {
			continue
		}
		parkedOf[pk.shown.callID] = pk.id
		st.Approvals.Count++
		if oldest.IsZero() || pk.c.start.Before(oldest) {
			oldest = pk.c.start
		}
	}
	if !oldest.IsZero() {
		st.Approvals.Oldest = oldest.UTC().Format(time.RFC3339)
		st.Approvals.OldestAgeS = roundS(now.Sub(oldest))
	}
	d.calls.mu.Lock()
	for _, c := range d.calls.calls {
		if !all && c.owner != name {
			continue
		}
		// What begin set, and never changes: not c.req (an approved
		// call is decoded again, under its own goroutine).
		st.Calls = append(st.Calls, api.StatusCall{CallID: c.id, Principal: c.owner, Tool: d.calls.tools[c.id], Task: c.task.id,
			Started: c.start.UTC().Format(time.RFC3339Nano), AgeS: roundS(now.Sub(c.start)), ApprovalID: parkedOf[c.id]})
	}
	for k := range d.calls.tasks {
		if all || k.principal == name {
			st.Tasks++
		}
	}
	d.calls.mu.Unlock()
	sort.Slice(st.Calls, func(i, j int) bool {
		if st.Calls[i].AgeS != st.Calls[j].AgeS {
			return st.Calls[i].AgeS > st.Calls[j].AgeS
		}
		return st.Calls[i].CallID < st.Calls[j].CallID
	})
	if all {
		p := d.acquire()
		for tool, pool := range p.pools() {
			sp := api.StatusPool{Tool: tool}
			if pool != nil {
				sp.Ready, sp.Size = pool.Ready(), pool.Size()
			}
			st.Pools = append(st.Pools, sp)
		}
		p.release()
		sort.Slice(st.Pools, func(i, j int) bool { return st.Pools[i].Tool < st.Pools[j].Tool })
		st.MCPSessions = d.mcp.Sessions()
	}
	st.Denials = d.recent.counts(now, name, all)
	st.Budgets = d.budgetStatus(name, all, true)
	writeJSON(w, http.StatusOK, st)
}

// handleTasks is GET /v1/tasks: the tasks the daemon remembers (used
// within --task-ttl, cancelled within it, or with calls in flight), the
// caller's own; an approver's, everyone's.
func (d *Daemon) handleTasks(w http.ResponseWriter, r *http.Request, peer Peer) {
	name, _, all, ok := d.viewer(w, peer)
	if !ok {
		return
	}
	out := api.Tasks{Tasks: []api.TaskInfo{}}
	g := d.calls
	g.mu.Lock()
	now := g.now()
	for k, ts := range g.tasks {
		if !all && k.principal != name {
			continue
		}
		live := !ts.cancelled.IsZero() && now.Sub(ts.cancelled) <= g.ttl
		if len(ts.calls) == 0 && now.Sub(ts.lastUsed) > g.ttl && !live {
			continue // forgotten at the next sweep
		}
		ti := api.TaskInfo{Task: k.id, Principal: k.principal, Generation: ts.gen, InFlight: len(ts.calls)}
		if !ts.lastUsed.IsZero() {
			ti.LastUsed = ts.lastUsed.UTC().Format(time.RFC3339)
		}
		if live {
			ti.Cancelled = ts.cancelled.UTC().Format(time.RFC3339)
		}
		out.Tasks = append(out.Tasks, ti)
	}
	g.mu.Unlock()
	sort.Slice(out.Tasks, func(i, j int) bool {
		a, b := out.Tasks[i], out.Tasks[j]
		if a.LastUsed != b.LastUsed {
			return a.LastUsed > b.LastUsed
		}
		if a.Principal != b.Principal {
			return a.Principal < b.Principal
		}
		return a.Task < b.Task
	})
	writeJSON(w, http.StatusOK, out)
}

// roundS is d in seconds to the millisecond.
func roundS(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}
