//go:build linux

package daemon

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sluicehq/sluice/api"
)

// errBusy says that no container slot came free within the queue timeout.
var errBusy = errors.New("no container slot free within the queue timeout")

// admission caps the containers that run calls at once (docs/sandbox.md,
// Admission). Without a cap a burst of execute calls starts every
// container at once on a few cores, and each of them then spends its
// timeout_ms sharing the CPUs with all the others: on 2 cores, 40 at once
// all ended timeout. A call over the cap waits in strict FIFO order (a later
// call never takes a slot before an earlier one, so none starves) until a
// slot is handed to it, its queue timeout passes, or its context ends.
type admission struct {
	limit int

	mu      sync.Mutex
	running int       // slots held
	queue   list.List // *waiter, oldest first
	// queued, when set, is called each time a caller joins the queue, so
	// that tests can order their callers without sleeping.
	queued func()
}

type waiter struct {
	ready   chan struct{} // closed once a slot is handed to this waiter
	granted bool          // under admission.mu
}

func newAdmission(limit int) *admission { return &admission{limit: max(limit, 1)} }

// acquire takes a slot, waiting up to timeout behind the callers that came
// before. It returns nil with a slot held (give it back with release),
// errBusy when no slot came free in time, or ctx's error when ctx ended
// first; a caller that gives up leaves the queue.
func (a *admission) acquire(ctx context.Context, timeout time.Duration) error {
	a.mu.Lock()
	if a.running < a.limit && a.queue.Len() == 0 {
		a.running++
		a.mu.Unlock()
		return nil
	}
	w := &waiter{ready: make(chan struct{})}
	e := a.queue.PushBack(w)
	hook := a.queued
	a.mu.Unlock()
	if hook != nil {
		hook()
	}

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var err error
	select {
	case <-w.ready:
		return nil
	case <-timer.C:
		err = errBusy
	case <-ctx.Done():
		err = ctx.Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !w.granted {
		a.queue.Remove(e)
		return err
	}
	// The slot was handed over as the wait ended. A caller still there
	// keeps it; one that went away passes it on to the next in line.
	if err == errBusy {
		return nil
	}
	a.releaseLocked()
	return err
}

// tryAcquire takes a slot only if one is free and nobody waits for one:
// it never queues, so it never passes a caller that came before.
func (a *admission) tryAcquire() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running < a.limit && a.queue.Len() == 0 {
		a.running++
		return true
	}
	return false
}

// release gives a slot back: to the oldest waiter, if any, else to the pool
// of free slots.
func (a *admission) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.releaseLocked()
}

func (a *admission) releaseLocked() {
	if e := a.queue.Front(); e != nil {
		w := a.queue.Remove(e).(*waiter)
		w.granted = true
		close(w.ready)
		return // the slot changes hands; running stays
	}
	a.running--
}

// stats reports the slots held and the callers waiting.
func (a *admission) stats() (running, waiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running, a.queue.Len()
}

// waitSlot holds an allowed execute call until it may run a container. The
// wait is not part of the command's timeout_ms: the sandbox's timer starts
// in Exec, after this. A call that gets no slot in time ends busy; nil means
// a slot is held, to be given back with c.d.slots.release.
func (c *call) waitSlot() *outcome {
	begin := time.Now()
	err := c.d.slots.acquire(c.ctx, c.d.cfg.QueueTimeout)
	switch {
	case err == nil:
		if waited := time.Since(begin); waited >= time.Millisecond {
			c.d.log.Debug("execute call admitted after queueing", "call_id", c.id, "tool", c.req.Tool, "waited", waited.String())
		}
		return nil
	case errors.Is(err, errBusy):
		c.d.log.Warn("execute call not admitted: all container slots stayed taken", "call_id", c.id, "tool", c.req.Tool,
			"max_containers", c.d.cfg.MaxContainers, "queue_timeout", c.d.cfg.QueueTimeout.String())
		return &outcome{reason: api.ReasonBusy}
	default:
		// Ended while queued: the client went away, its task was
		// cancelled, or sluiced is shutting down.
		return &outcome{reason: c.endReason()}
	}
}
