package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/securefs"
)

// registry holds every call in flight, by id and by task, so that task
// cancels and shutdown can find them and end them with their own cause. A
// call's context derives from the daemon's, not from its HTTP request.
type registry struct {
	mu    sync.Mutex
	base  context.Context
	calls map[string]*call
	tasks map[string]*taskState
	// ttl is how long a cancelled task stays cancelled.
	ttl     time.Duration
	now     func() time.Time
	drained chan struct{} // closed and replaced as the last call ends
	n       int
	lastGC  time.Time
}

type taskState struct {
	owners    map[string]bool // principals that made calls with it
	lastUsed  time.Time
	gen       uint64
	cancelled time.Time // zero: not cancelled
	calls     map[*call]struct{}
}

func newRegistry(base context.Context, ttl time.Duration) *registry {
	return &registry{base: base, calls: map[string]*call{}, tasks: map[string]*taskState{},
		ttl: ttl, now: time.Now, drained: make(chan struct{})}
}

// begin registers a new call and gives it its context and id.
func (g *registry) begin(d *Daemon, p *policy, peer Peer, dc *decoded, start time.Time) *call {
	ctx, stop := context.WithCancelCause(g.base)
	c := &call{decoded: dc, d: d, p: p, ctx: ctx, stop: stop, peer: peer, start: start, id: newCallID(),
		handles: map[int]*securefs.Handle{}}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls[c.id] = c
	g.n++
	if t := dc.req.Task; t != "" {
		ts := g.task(t)
		ts.calls[c] = struct{}{}
		ts.lastUsed = g.now()
		if name, ok := p.m.Identify(peer.UID, peer.GID); ok {
			ts.owners[name] = true
		}
		c.gen = ts.gen
		if !ts.cancelled.IsZero() {
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
	if ts := g.tasks[c.req.Task]; ts != nil {
		delete(ts.calls, c)
	}
	if g.n--; g.n == 0 {
		close(g.drained)
		g.drained = make(chan struct{})
	}
	g.gcTasks()
}

// task returns the state of a task, made on first use; g.mu held.
func (g *registry) task(name string) *taskState {
	ts := g.tasks[name]
	if ts == nil {
		ts = &taskState{calls: map[*call]struct{}{}, owners: map[string]bool{}}
		g.tasks[name] = ts
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
	for name, ts := range g.tasks {
		if len(ts.calls) == 0 && now.Sub(ts.lastUsed) > g.ttl && (ts.cancelled.IsZero() || now.Sub(ts.cancelled) > g.ttl) {
			delete(g.tasks, name)
		}
	}
}

// cancelTask bumps the task's generation, ends its calls in flight with
// errTaskCancelled, and keeps it cancelled for the ttl. It returns how
// many calls it ended and the new generation.
func (g *registry) cancelTask(name, by string) (int, uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := g.task(name)
	ts.owners[by] = true
	ts.gen++
	ts.cancelled = g.now()
	for c := range ts.calls {
		c.stop(errTaskCancelled)
	}
	return len(ts.calls), ts.gen
}

// owns reports whether principal made calls with task (while the daemon
// remembers it).
func (g *registry) owns(task, principal string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := g.tasks[task]
	return ts != nil && ts.owners[principal]
}

// current reports whether the call's task is still at the generation it
// was decided under (always true without a task): a write whose task was
// cancelled between decision and commit does not commit.
func (g *registry) current(c *call) bool {
	if c.req.Task == "" {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := g.tasks[c.req.Task]
	return ts != nil && ts.gen == c.gen && (ts.cancelled.IsZero() || g.now().Sub(ts.cancelled) > g.ttl)
}

// cancelled reports whether a task is cancelled now.
func (g *registry) cancelled(task string) bool {
	if task == "" {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := g.tasks[task]
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
func (c *call) checkTask() {
	if c.dec.Allowed() || c.dec.Pending() {
		if c.d.calls.cancelled(c.req.Task) {
			c.dec = authz.Decision{Reason: api.ReasonTaskCancelled, Rule: "task"}
		}
	}
}
