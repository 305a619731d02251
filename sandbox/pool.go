//go:build linux

package sandbox

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"time"
)

// PoolSize is how many containers a pool keeps waiting: Min when idle,
// growing by one for each call that found the pool empty after it had
// filled up (a burst bigger than the pool), up to Max, and shrinking by
// one (a waiting box destroyed) per ShrinkAfter without a single call,
// back to Min.
type PoolSize struct {
	Min, Max int
	// ShrinkAfter is the idle time per step down; 0: DefaultShrinkAfter.
	ShrinkAfter time.Duration
}

// DefaultShrinkAfter is how long a pool goes without a call before it
// gives one waiting box back (see PoolSize).
const DefaultShrinkAfter = 30 * time.Second

// Pool keeps up to size containers of one spec created ahead, their helper
// waiting for an argv, so a call skips the ~20 ms of container creation.
// A box leaves the pool once and is never reused; the pool refills in the
// background, creating up to one box per core at a time (and all of a
// runner's pools together no more: see Runner.fillSlots). Close destroys
// what waits.
type Pool struct {
	r      *Runner
	spec   *Spec
	newBox func(*Spec) (*Box, error) // r.Create
	min    int
	max    int
	idle   time.Duration
	log    *slog.Logger
	ready  chan *Box
	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	warm   chan struct{} // closed once the first box is ready
	once   sync.Once

	mu       sync.Mutex
	failing  bool          // a creation failed and the filler has not started another since: GetWait does not wait
	waiting  int           // calls in GetWait: a box is made for each, beyond the target
	failed   chan struct{} // closed (and replaced) when a creation fails: waiters give up
	target   int           // boxes to keep: min..max
	full     bool          // reached target since it last grew
	creating int           // creations in flight
	lastGet  time.Time     // last call to Get, for shrinking
	wg       sync.WaitGroup
}

// NewPool starts filling a pool of size containers for spec. spec's mount
// fds must stay open until Close returns.
func NewPool(r *Runner, spec *Spec, size int, log *slog.Logger) *Pool {
	return NewPoolSized(r, spec, PoolSize{Min: size, Max: size}, log)
}

// NewPoolSized starts a pool that sizes itself from demand between
// size.Min and size.Max.
func NewPoolSized(r *Runner, spec *Spec, size PoolSize, log *slog.Logger) *Pool {
	return newPool(r, spec, size, log, r.Create)
}

// newPool is NewPoolSized with the function that makes a box (a test
// makes one that fails).
func newPool(r *Runner, spec *Spec, size PoolSize, log *slog.Logger, newBox func(*Spec) (*Box, error)) *Pool {
	size.Max = max(size.Max, size.Min)
	if size.ShrinkAfter <= 0 {
		size.ShrinkAfter = DefaultShrinkAfter
	}
	p := &Pool{r: r, spec: spec, newBox: newBox, min: size.Min, max: size.Max, idle: size.ShrinkAfter, log: log,
		ready: make(chan *Box, size.Max), kick: make(chan struct{}, 1), stop: make(chan struct{}),
		done: make(chan struct{}), warm: make(chan struct{}), failed: make(chan struct{}),
		target: size.Min, lastGet: time.Now()}
	if size.Min == 0 && size.Max > 0 {
		close(p.warm) // nothing to wait for: it fills only under load
	}
	go p.fill()
	return p
}

// fillWorkers is how many containers one pool creates at once, and all of
// a runner's pools together: two per core. Creation is mostly CPU (the
// init's Go runtime, mounts, cgroups) but a chain of processes that wait
// on each other (exec, nsenter's stages, the sync pipes), so one creation
// leaves its core idle at times; more than two per core would only slow
// each other and the calls running. Measured (bench/tputab, 8 clients back
// to back, pool 8, calls waiting for the pool): one per core 110.8 and
// 115.1 calls/s, two per core 120.8 and 119.1.
func fillWorkers() int { return 2 * max(runtime.NumCPU(), 1) }

func (p *Pool) fill() {
	defer close(p.done)
	defer p.wg.Wait()
	backoff := 100 * time.Millisecond
	failed := make(chan struct{}, fillWorkers())
	tick := time.NewTicker(p.idle)
	defer tick.Stop()
	for {
		p.mu.Lock()
		// The target, plus one for each call waiting (GetWait): under
		// a queue, boxes go straight to callers and the buffer stays
		// empty, and the callers' boxes must still be made, up to
		// fillWorkers at once.
		for len(p.ready)+p.creating < p.target+p.waiting && p.creating < fillWorkers() {
			p.failing = false
			p.creating++
			p.wg.Add(1)
			go p.create(failed)
		}
		p.mu.Unlock()
		select {
		case <-p.stop:
			return
		case <-p.kick:
			backoff = 100 * time.Millisecond
		case <-failed:
			select {
			case <-p.stop:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
		case <-tick.C:
			p.shrink()
		}
	}
}

// create makes one box and hands it to the pool (or destroys it, when the
// pool closed or shrank meanwhile).
func (p *Pool) create(failed chan<- struct{}) {
	defer p.wg.Done()
	// At most fillWorkers creations across all of the runner's pools.
	select {
	case p.r.fillSlots <- struct{}{}:
	case <-p.stop:
		p.mu.Lock()
		p.creating--
		p.mu.Unlock()
		return
	}
	b, err := p.newBox(p.spec)
	<-p.r.fillSlots
	p.mu.Lock()
	p.creating--
	if err != nil {
		// Cleared when the filler next starts a creation, after its
		// backoff, not by a success in parallel: until then nothing
		// is being made for a waiting call.
		p.failing = true
		close(p.failed)
		p.failed = make(chan struct{})
	}
	keep := err == nil && len(p.ready) < p.target+p.waiting
	if keep {
		select {
		case <-p.stop:
			keep = false
		case p.ready <- b: // to a waiting call, or into the buffer
			p.full = p.full || len(p.ready) >= p.target
		default:
			keep = false // the buffer is full (max) and nobody waits
		}
	}
	p.mu.Unlock()
	if err != nil {
		p.log.Error("sandbox pool: create container", "err", err)
		select {
		case failed <- struct{}{}:
		default:
		}
		return
	}
	if !keep {
		b.Destroy()
		return
	}
	p.warmed()
	p.refill() // the filler tops up the rest
}

// shrink steps the target down by one toward min after a whole idle
// period without a call, and destroys a box that is then surplus.
func (p *Pool) shrink() {
	p.mu.Lock()
	if p.target <= p.min || time.Since(p.lastGet) < p.idle {
		p.mu.Unlock()
		return
	}
	p.target--
	var surplus *Box
	if len(p.ready) > p.target {
		surplus = <-p.ready
	}
	p.mu.Unlock()
	if surplus != nil {
		surplus.Destroy()
	}
}

// Get returns a waiting box, or nil when none is ready (the caller then
// creates one cold, and the pool grows by one, up to its max). It never
// blocks. The refill for a box handed out starts when its command has
// finished.
func (p *Pool) Get() *Box {
	p.mu.Lock()
	p.lastGet = time.Now()
	var b *Box
	select {
	case b = <-p.ready:
	default:
		// A burst drained a full pool: keep one more. A pool still
		// filling (just started, reloaded, or refilling slower than
		// calls come) does not grow: more waiting boxes would not
		// make boxes sooner.
		// A pool of 0 (pool 0, pool_max above it) is full when empty.
		if (p.full || p.target == 0) && p.target < p.max {
			p.target++
			p.full = false
		}
	}
	p.mu.Unlock()
	if b == nil {
		p.refill() // empty: refill now, the caller goes cold
		return nil
	}
	b.onRelease = p.refill
	return b
}

// GetWait is Get, except that when no box is ready and the pool is making
// them (its last creation did not fail) it waits, up to wait or until ctx
// ends, for the next one; nil: the caller goes cold (also when a
// creation fails meanwhile). Under load this
// queues calls for the pool's boxes in order (a channel's receivers are
// served first come, first served) instead of adding a cold creation of
// each caller's own to the pool's: the same CPU per call, but not more
// creations at once than fillWorkers, and no call's luck decides its
// latency. Measured (bench/tputab, 8 clients back to back, pool 8,
// interleaved): p95 130.8 -> 88.4 ms; bursts of 8 on pool 2, p50 49.6 ->
// 41.2 ms.
func (p *Pool) GetWait(ctx context.Context, wait time.Duration) *Box {
	if b := p.Get(); b != nil || wait <= 0 {
		return b
	}
	p.mu.Lock()
	coming := !p.failing && (p.creating > 0 || len(p.ready) < p.target)
	failed := p.failed
	if coming {
		p.waiting++
	}
	p.mu.Unlock()
	if !coming {
		return nil // nothing is being made, or making failed: go cold
	}
	p.refill() // the filler counts this call now
	defer func() {
		p.mu.Lock()
		p.waiting--
		p.mu.Unlock()
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case b, ok := <-p.ready:
		if !ok {
			return nil // closed
		}
		b.onRelease = p.refill
		return b
	case <-failed:
	case <-t.C:
	case <-ctx.Done():
	case <-p.stop:
	}
	return nil
}

func (p *Pool) refill() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *Pool) warmed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.warm:
	default:
		close(p.warm)
	}
}

// WaitWarm waits until the pool's first box is ready (it stays warm
// from then on but for the moments between a call and its refill), the
// pool is closed, or ctx ends, and reports whether it got warm.
func (p *Pool) WaitWarm(ctx context.Context) bool {
	select {
	case <-p.warm:
		return true
	case <-p.done:
	case <-ctx.Done():
	}
	select {
	case <-p.warm:
		return true
	default:
		return false
	}
}

// Min is how many boxes the pool keeps when idle.
func (p *Pool) Min() int { return p.min }

// Ready is how many boxes wait now.
func (p *Pool) Ready() int { return len(p.ready) }

// Size is how many boxes the pool keeps ready when full: its current
// target, between its min and max.
func (p *Pool) Size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// Close stops refilling, waits for creations in flight and destroys the
// waiting boxes.
func (p *Pool) Close() {
	p.once.Do(func() {
		close(p.stop)
		<-p.done
		p.mu.Lock()
		close(p.ready)
		p.mu.Unlock()
		for b := range p.ready {
			b.Destroy()
		}
	})
}
