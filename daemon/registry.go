//go:build linux

package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
)

// registry holds every call in flight, by id and by task, so that task
// cancels and shutdown can find them and end them with their own cause. A
// call's context derives from the daemon's, not from its HTTP request.
//
// Tasks belong to principals: the key is (principal, task id), so two
// principals that pick the same id have two tasks, and one can never end,
// or pre-cancel, the other's (review class 2: a denied call naming
// another's task used to make its caller an owner).
type registry struct {
	mu    sync.Mutex
	base  context.Context
	calls map[string]*call
	// tools is each call's tool as its request named it, for GET
	// /v1/status (status.go): an approved call is decoded again, so its
	// own fields are not the registry's to read.
	tools map[string]string
	tasks map[taskKey]*taskState
	// ttl is how long a cancelled task stays cancelled.
	ttl     time.Duration
	now     func() time.Time
	drained chan struct{} // closed and replaced as the last call ends
	n       int
	lastGC  time.Time
}

// taskKey names a task: a principal's own id. A peer that maps to no
// principal has the empty name; its calls are all denied.
type taskKey struct {
	principal, id string
}

type taskState struct {
	// used: an allowed (or approval-pending) call of the principal used
	// the task, which is what lets that principal cancel it.
	used      bool
	lastUsed  time.Time
	gen       uint64
	cancelled time.Time // zero: not cancelled
	calls     map[*call]struct{}
}

func newRegistry(base context.Context, ttl time.Duration) *registry {
	return &registry{base: base, calls: map[string]*call{}, tools: map[string]string{}, tasks: map[taskKey]*taskState{},
		ttl: ttl, now: time.Now, drained: make(chan struct{})}
}

// begin registers a new call and gives it its context and id.
func (g *registry) begin(d *Daemon, p *policy, peer Peer, dc *decoded, start time.Time, tu *tokenUse) *call {
	ctx, stop := context.WithCancelCause(g.base)
	c := &call{decoded: dc, d: d, p: p, ctx: ctx, stop: stop, peer: peer, start: start, id: newCallID(), tok: tu}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls[c.id] = c
	g.tools[c.id] = dc.req.Tool
	g.n++
	c.owner = c.ownerName(p.m) // a token's minter
	if t := dc.req.Task; t != "" {
		c.task = taskKey{c.owner, t}
		ts := g.task(c.task)
		ts.calls[c] = struct{}{}
		ts.lastUsed = g.now()
		c.gen = ts.gen
		// Cancelled for the TTL, as cancelled() and current() see it:
		// once it has passed, the task id may be used again.
		if !ts.cancelled.IsZero() && g.now().Sub(ts.cancelled) <= g.ttl {
			stop(errTaskCancelled)
		}
	}
	return c
}

// end forgets a call and releases what it still holds.
func (g *registry) end(c *call) {
	c.closeHandles()
	c.stop(context.Canceled)
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.calls, c.id)
	delete(g.tools, c.id)
	if ts := g.tasks[c.task]; ts != nil {
		delete(ts.calls, c)
	}
	if g.n--; g.n == 0 {
		close(g.drained)
		g.drained = make(chan struct{})
	}
	g.gcTasks()
}

// task returns the state of a task, made on first use; g.mu held.
func (g *registry) task(k taskKey) *taskState {
	ts := g.tasks[k]
	if ts == nil {
		ts = &taskState{calls: map[*call]struct{}{}}
		g.tasks[k] = ts
	}
	return ts
}

// gcTasks forgets, at most once a minute, tasks with no call in flight
// that were last used, and last cancelled, more than a TTL ago; g.mu held.
func (g *registry) gcTasks() {
	now := g.now()
	if now.Sub(g.lastGC) < time.Minute {
		return
	}
	g.lastGC = now
	for k, ts := range g.tasks {
		if len(ts.calls) == 0 && now.Sub(ts.lastUsed) > g.ttl && (ts.cancelled.IsZero() || now.Sub(ts.cancelled) > g.ttl) {
			delete(g.tasks, k)
		}
	}
}

// cancelTask bumps the generation of each task in keys, ends their calls
// in flight with errTaskCancelled, and keeps them cancelled for the ttl.
// It returns how many calls it ended and the highest new generation.
func (g *registry) cancelTask(keys []taskKey) (int, uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n, gen := 0, uint64(0)
	for _, k := range keys {
		ts := g.task(k)
		ts.gen++
		ts.cancelled = g.now()
		for c := range ts.calls {
			c.stop(errTaskCancelled)
		}
		n += len(ts.calls)
		gen = max(gen, ts.gen)
	}
	return n, gen
}

// cancelCall ends the call with this id, in flight, with a cancelError
// naming by, when principal is its owner or the canceller is an approver.
// It reports false both for an unknown id and for another principal's
// call, so that ids cannot be probed. A peer that maps to no principal
// (principal "") owns nothing.
func (g *registry) cancelCall(id, principal string, approver bool, by string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.calls[id]
	if c == nil || c.answered.Load() || !(approver || (principal != "" && c.owner == principal)) {
		return false // an answered call has ended, though its handler may not have returned yet
	}
	c.stop(&cancelError{by: by})
	return true
}

// use marks the call's task as used by an allowed (or pending) call of
// its principal: from then on that principal may cancel it.
func (g *registry) use(c *call) {
	if c.task.id == "" || c.task.principal == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if ts := g.tasks[c.task]; ts != nil {
		ts.used = true
	}
}

// owns reports whether principal's allowed calls used its task id (while
// the daemon remembers it).
func (g *registry) owns(principal, id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := g.tasks[taskKey{principal, id}]
	return ts != nil && ts.used
}

// tasksNamed lists every principal's task with this id, for an approver's
// cancel.
func (g *registry) tasksNamed(id string) []taskKey {
	g.mu.Lock()
	defer g.mu.Unlock()
	var keys []taskKey
	for k := range g.tasks {
		if k.id == id {
			keys = append(keys, k)
		}
	}
	return keys
}

// current reports whether the call's task is still at the generation it
// was decided under (always true without a task): a write whose task was
// cancelled between decision and commit does not commit.
func (g *registry) current(c *call) bool {
	if c.task.id == "" {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := g.tasks[c.task]
	return ts != nil && ts.gen == c.gen && (ts.cancelled.IsZero() || g.now().Sub(ts.cancelled) > g.ttl)
}

// cancelled reports whether a task is cancelled now.
func (g *registry) cancelled(k taskKey) bool {
	if k.id == "" {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := g.tasks[k]
	return ts != nil && !ts.cancelled.IsZero() && g.now().Sub(ts.cancelled) <= g.ttl
}

// inFlight is how many calls are registered.
func (g *registry) inFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// wait returns once no call is in flight, or when ctx ends (false).
func (g *registry) wait(ctx context.Context) bool {
	for {
		g.mu.Lock()
		n, ch := g.n, g.drained
		g.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// checkTask denies a call whose task is cancelled (task_cancelled), after
// Decide: authz is pure and knows no tasks.
//
// A call that stays allowed (or pending) marks its task as used: only
// then may its principal cancel the task.
func (c *call) checkTask() {
	if c.dec.Allowed() || c.dec.Pending() {
		if c.d.calls.cancelled(c.task) {
			c.dec = authz.Decision{Reason: api.ReasonTaskCancelled, Rule: "task"}
			return
		}
		c.d.calls.use(c)
	}
}
