//go:build linux

// Package admission holds the daemon's two admissions: the container
// slots execute calls wait for, shared fairly between principals, and the
// per-uid limit on the decision records of peers mapped to no principal.
package admission

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"
)

// ErrBusy says that no container slot came free within the queue timeout.
var ErrBusy = errors.New("no container slot free within the queue timeout")

// Slots caps the containers that run calls at once (docs/operating.md,
// Container admission; docs/design.md §4). Without a cap a burst of
// execute calls starts every container at once on a few cores, and each of
// them then spends its timeout_ms sharing the CPUs with all the others: on
// 2 cores, 40 at once all ended timeout.
//
// The slots are shared between principals: one FIFO for everyone let a
// principal with many calls queued make another's single call wait behind
// all of them and end busy (docs/security.md, The third review). A call
// over the cap waits in its principal's own queue; a slot given back goes
// to the principal with calls waiting that holds the fewest slots, the
// slot being given back still counted as its holder's (else a principal
// whose call ends would take the slot back from one that holds none), and
// among principals holding as many, to the one whose oldest waiting call
// came first. So a principal that holds no slot is served at the next
// slot given back, behind at most one call of each other principal that
// holds none and was waiting first, never behind another's second queued
// call; a principal's own calls are served in the order they came. A
// running call is never stopped to make room: a slot changes hands only
// when its call ends.
//
// A caller waits until a slot is handed to it, its queue timeout passes,
// or its context ends. Waiters exist only while every slot is held (a
// slot given back goes straight to one), so a caller that finds a slot
// free passes nobody in taking it.
type Slots struct {
	limit int

	mu         sync.Mutex
	running    int                        // slots held
	waiting    int                        // callers queued, all principals
	seq        uint64                     // arrival order of waiters
	principals map[string]*principalSlots // principals holding, waiting for or lately done with slots
	// queued, when set, is called each time a caller joins the queue, so
	// that tests can order their callers without sleeping.
	Queued func()
}

// principalSlots is one principal's share of the admission: the slots it
// holds and its queue.
type principalSlots struct {
	held  int
	queue list.List // *waiter, oldest first
}

type waiter struct {
	ready   chan struct{} // closed once a slot is handed to this waiter
	seq     uint64        // when it came, across principals
	granted bool          // under Slots.mu
}

func NewSlots(limit int) *Slots {
	return &Slots{limit: max(limit, 1), principals: map[string]*principalSlots{}}
}

func (a *Slots) slotsOf(principal string) *principalSlots {
	ps := a.principals[principal]
	if ps == nil {
		ps = &principalSlots{}
		a.principals[principal] = ps
	}
	return ps
}

// keepIdle is how many principals' entries are kept while they hold and
// wait for nothing, so that a principal's next call allocates nothing
// (principals are the manifest's, a few): beyond it, an entry is dropped
// as it goes idle.
const keepIdle = 64

// forget drops principal's entry if it holds and waits for nothing and
// more than keepIdle are kept.
func (a *Slots) forget(principal string, ps *principalSlots) {
	if ps.held == 0 && ps.queue.Len() == 0 && len(a.principals) > keepIdle {
		delete(a.principals, principal)
	}
}

// Acquire takes a slot for principal, waiting up to timeout for its turn
// (see Slots). It returns nil with a slot held (give it back with
// Release, naming the same principal), ErrBusy when no slot came to it in
// time, or ctx's error when ctx ended first; a caller that gives up leaves
// the queue.
func (a *Slots) Acquire(ctx context.Context, principal string, timeout time.Duration) error {
	a.mu.Lock()
	ps := a.slotsOf(principal)
	if a.running < a.limit && a.waiting == 0 {
		a.running++
		ps.held++
		a.mu.Unlock()
		return nil
	}
	a.seq++
	w := &waiter{ready: make(chan struct{}), seq: a.seq}
	e := ps.queue.PushBack(w)
	a.waiting++
	hook := a.Queued
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
		err = ErrBusy
	case <-ctx.Done():
		err = ctx.Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !w.granted {
		ps.queue.Remove(e)
		a.waiting--
		a.forget(principal, ps)
		return err
	}
	// The slot was handed over as the wait ended. A caller still there
	// keeps it; one that went away passes it on to the next in turn.
	if err == ErrBusy {
		return nil
	}
	a.releaseLocked(principal)
	return err
}

// TryAcquire takes a slot for principal only if one is free: it never
// queues, and never passes a caller waiting, of any principal (callers
// wait only while no slot is free).
func (a *Slots) TryAcquire(principal string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running < a.limit && a.waiting == 0 {
		a.running++
		a.slotsOf(principal).held++
		return true
	}
	return false
}

// Release gives back a slot principal held: to the next waiter in turn,
// if any, else to the free slots.
func (a *Slots) Release(principal string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.releaseLocked(principal)
}

func (a *Slots) releaseLocked(principal string) {
	from := a.principals[principal]
	if from == nil || from.held == 0 {
		panic("admission: release of a slot " + principal + " does not hold")
	}
	// The next in turn is chosen while the slot still counts as its
	// holder's (see Slots).
	var next *principalSlots
	var nextName string
	var first *waiter
	for name, ps := range a.principals {
		e := ps.queue.Front()
		if e == nil {
			continue
		}
		w := e.Value.(*waiter)
		if next == nil || ps.held < next.held || ps.held == next.held && w.seq < first.seq {
			next, nextName, first = ps, name, w
		}
	}
	from.held--
	if next == nil {
		a.running--
		a.forget(principal, from)
		return
	}
	next.queue.Remove(next.queue.Front())
	a.waiting--
	next.held++
	first.granted = true
	close(first.ready)
	if nextName != principal {
		a.forget(principal, from)
	} // the slot changes hands; running stays
}

// Stats reports the slots held and the callers waiting.
func (a *Slots) Stats() (running, waiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running, a.waiting
}
