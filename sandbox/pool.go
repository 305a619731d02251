//go:build linux

package sandbox

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Pool keeps up to size containers of one spec created ahead, their helper
// waiting for an argv, so a call skips the ~20 ms of container creation.
// A box leaves the pool once and is never reused; the pool refills in the
// background. Close destroys what waits.
type Pool struct {
	r     *Runner
	spec  *Spec
	size  int
	log   *slog.Logger
	ready chan *Box
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	warm  chan struct{} // closed once the first box is ready
	once  sync.Once
}

// NewPool starts filling a pool of size containers for spec. spec's mount
// fds must stay open until Close returns.
func NewPool(r *Runner, spec *Spec, size int, log *slog.Logger) *Pool {
	p := &Pool{r: r, spec: spec, size: size, log: log, ready: make(chan *Box, size),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), warm: make(chan struct{})}
	go p.fill()
	return p
}

func (p *Pool) fill() {
	defer close(p.done)
	backoff := 100 * time.Millisecond
	for {
		for len(p.ready) < p.size {
			select {
			case <-p.stop:
				return
			default:
			}
			b, err := p.r.Create(p.spec)
			if err != nil {
				p.log.Error("sandbox pool: create container", "err", err, "retry_in", backoff.String())
				select {
				case <-p.stop:
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 30*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
			p.ready <- b
			p.warmed()
		}
		select {
		case <-p.stop:
			return
		case <-p.kick:
		}
	}
}

// Get returns a waiting box, or nil when none is ready (the caller then
// creates one cold). It never blocks. The refill for a box handed out
// starts when its command has finished.
func (p *Pool) Get() *Box {
	select {
	case b := <-p.ready:
		b.onRelease = p.refill
		return b
	default:
		p.refill() // empty: refill now, the caller goes cold
		return nil
	}
}

func (p *Pool) refill() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *Pool) warmed() {
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

// Ready is how many boxes wait now.
func (p *Pool) Ready() int { return len(p.ready) }

// Size is how many boxes the pool keeps ready when full.
func (p *Pool) Size() int { return p.size }

// Close stops refilling and destroys the waiting boxes.
func (p *Pool) Close() {
	p.once.Do(func() {
		close(p.stop)
		<-p.done
		close(p.ready)
		for b := range p.ready {
			b.Destroy()
		}
	})
}
