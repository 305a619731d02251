//go:build linux

package admission

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// queuedAdmission returns an admission that signals each caller joining
// its queue, so a test can line callers up in a known order.
func queuedAdmission(limit int) (*Slots, <-chan struct{}) {
	a := NewSlots(limit)
	q := make(chan struct{}, 64)
	a.Queued = func() { q <- struct{}{} }
	return a, q
}

// agent is the principal of the tests of one principal.
const agent = "agent"

func wantStats(t *testing.T, a *Slots, running, waiting int) {
	t.Helper()
	if r, w := a.Stats(); r != running || w != waiting {
		t.Fatalf("running %d waiting %d, want %d and %d", r, w, running, waiting)
	}
	held := 0
	for _, ps := range a.principals {
		held += ps.held
	}
	if held != running {
		t.Fatalf("principals hold %d slots, %d are held", held, running)
	}
}

// TestAdmissionFIFO: callers over the cap are admitted in the order they
// came, one per slot given back.
func TestAdmissionFIFO(t *testing.T) {
	a, queued := queuedAdmission(2)
	ctx := context.Background()
	for range 2 {
		if err := a.Acquire(ctx, agent, 0); err != nil {
			t.Fatalf("a free slot was refused: %v", err)
		}
	}
	const n = 8
	admitted := make(chan int, n)
	failed := make(chan error, n)
	for i := range n {
		go func() {
			if err := a.Acquire(ctx, agent, time.Hour); err != nil {
				failed <- err
				return
			}
			admitted <- i
		}()
		<-queued // i is in line before i+1 starts
	}
	wantStats(t, a, 2, n)
	for i := range n {
		a.Release(agent)
		select {
		case got := <-admitted:
			if got != i {
				t.Fatalf("caller %d admitted when caller %d was first in line", got, i)
			}
		case err := <-failed:
			t.Fatal(err)
		}
	}
	wantStats(t, a, 2, 0)
	a.Release(agent)
	a.Release(agent)
	wantStats(t, a, 0, 0)
}

// admissionOrderCases: the order in which callers over the cap are served
// as slots are given back, across principals (docs/design.md §5). hold is
// who holds the slots at first; queue is who comes, in this order, while
// all are held (the n-th caller of principal p is named p and n, from 1);
// release is whose slot is given back, one at a time; want is who is
// served at each. One FIFO for everyone served alice's queue before bob
// and ended bob's call busy (docs/security.md, The third review).
var admissionOrderCases = []struct {
	name    string
	hold    []string
	queue   []string
	release []string
	want    []string
}{
	{name: "one principal: first come, first served",
		hold: []string{"a", "a"}, queue: []string{"a", "a", "a"},
		release: []string{"a", "a", "a"}, want: []string{"a1", "a2", "a3"}},
	{name: "a principal with no slot before another's queue",
		hold: []string{"alice", "alice"}, queue: []string{"alice", "alice", "alice", "alice", "bob"},
		release: []string{"alice", "alice", "bob", "alice", "alice"},
		want:    []string{"bob1", "alice1", "alice2", "alice3", "alice4"}},
	{name: "one slot: turns alternate between queues",
		hold: []string{"a"}, queue: []string{"a", "a", "a", "b", "b", "b"},
		release: []string{"a", "b", "a", "b", "a", "b"},
		want:    []string{"b1", "a1", "b2", "a2", "b3", "a3"}},
	{name: "fewest slots held first, then oldest waiting call",
		hold: []string{"a", "a", "b"}, queue: []string{"a", "b", "c"},
		release: []string{"a", "b", "a"}, want: []string{"c1", "a1", "b1"}},
	{name: "the slot given back still counts as its holder's",
		// a's call ends: a would hold none and take the slot back
		// with its older caller, from c who holds none and waits.
		hold: []string{"a", "b"}, queue: []string{"a", "a", "c"},
		release: []string{"a", "b", "c"}, want: []string{"c1", "a1", "a2"}},
	{name: "holding as many: the oldest waiting call",
		hold: []string{"a", "b"}, queue: []string{"b", "a"},
		release: []string{"a", "b"}, want: []string{"b1", "a1"}},
	{name: "three principals, a flood from one",
		hold: []string{"x", "x"}, queue: []string{"x", "x", "x", "y", "z", "y", "z"},
		release: []string{"x", "x", "y", "z", "x", "y", "z"},
		want:    []string{"y1", "z1", "x1", "y2", "z2", "x2", "x3"}},
}

// TestAdmissionOrder runs admissionOrderCases: each caller says it was
// served on a channel, and each slot given back serves exactly one.
func TestAdmissionOrder(t *testing.T) {
	for _, tc := range admissionOrderCases {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.release) != len(tc.queue) || len(tc.want) != len(tc.queue) {
				t.Fatal("bad case: one release and one served per caller queued")
			}
			a, queued := queuedAdmission(len(tc.hold))
			ctx := context.Background()
			for _, p := range tc.hold {
				if err := a.Acquire(ctx, p, 0); err != nil {
					t.Fatalf("a free slot was refused to %s: %v", p, err)
				}
			}
			served := make(chan string, len(tc.queue))
			failed := make(chan error, len(tc.queue))
			n := map[string]int{}
			for _, p := range tc.queue {
				n[p]++
				name := fmt.Sprint(p, n[p])
				go func() {
					if err := a.Acquire(ctx, p, time.Hour); err != nil {
						failed <- fmt.Errorf("%s: %w", name, err)
						return
					}
					served <- name
				}()
				<-queued // in line before the next one comes
			}
			wantStats(t, a, len(tc.hold), len(tc.queue))
			var got []string
			for _, p := range tc.release {
				a.Release(p)
				select {
				case name := <-served:
					got = append(got, name)
				case err := <-failed:
					t.Fatal(err)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("served %v, want %v", got, tc.want)
			}
			wantStats(t, a, len(tc.hold), 0)
			// Whoever holds the slots now gives them back.
			for p, ps := range maps.Clone(a.principals) {
				for range ps.held {
					a.Release(p)
				}
			}
			wantStats(t, a, 0, 0)
		})
	}
}

// TestAdmissionTryAcquirePrincipals: tryAcquire passes no principal's
// caller in line, its own principal's or another's.
func TestAdmissionTryAcquirePrincipals(t *testing.T) {
	a, queued := queuedAdmission(2)
	ctx := context.Background()
	for _, p := range []string{"alice", "alice"} {
		if !a.TryAcquire(p) {
			t.Fatalf("no free slot for %s", p)
		}
	}
	bob := make(chan error, 1)
	go func() { bob <- a.Acquire(ctx, "bob", time.Hour) }()
	<-queued
	for _, p := range []string{"alice", "bob", "carol"} {
		if a.TryAcquire(p) {
			t.Fatalf("%s took a slot over the cap", p)
		}
	}
	a.Release("alice")
	for _, p := range []string{"alice", "bob", "carol"} {
		if a.TryAcquire(p) {
			t.Fatalf("%s took the slot given to bob", p)
		}
	}
	if err := <-bob; err != nil {
		t.Fatal(err)
	}
	a.Release("bob")
	if !a.TryAcquire("carol") {
		t.Fatal("a free slot was refused")
	}
	a.Release("carol")
	a.Release("alice")
	wantStats(t, a, 0, 0)
}

// TestAdmissionIdlePrincipals: a principal done with its slots leaves no
// entry behind beyond keepIdle of them.
func TestAdmissionIdlePrincipals(t *testing.T) {
	a := NewSlots(1)
	for i := range 4 * keepIdle {
		p := fmt.Sprint("p", i)
		if !a.TryAcquire(p) {
			t.Fatal("no free slot")
		}
		a.Release(p)
	}
	if n := len(a.principals); n > keepIdle {
		t.Fatalf("%d idle principals kept, at most %d", n, keepIdle)
	}
	wantStats(t, a, 0, 0)
}

// TestAdmissionNoOvertaking: a slot given back goes to the first in line,
// never to a caller that arrives as it is freed.
func TestAdmissionNoOvertaking(t *testing.T) {
	a, queued := queuedAdmission(1)
	ctx := context.Background()
	if err := a.Acquire(ctx, agent, 0); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- a.Acquire(ctx, agent, time.Hour) }()
	<-queued
	a.Release(agent)
	// The slot is already the waiter's, whether or not it has woken up.
	if err := a.Acquire(ctx, agent, 0); !errors.Is(err, ErrBusy) {
		t.Fatalf("a newcomer took the slot of the caller in line: %v", err)
	}
	<-queued // the newcomer's own (timed-out) turn in line
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wantStats(t, a, 1, 0)
	a.Release(agent)
	wantStats(t, a, 0, 0)
}

// TestAdmissionTryAcquire: tryAcquire (a cold box started while its
// decision syncs) takes a free slot, never queues, and never passes a
// caller in line, even when a slot has just been given back to it.
func TestAdmissionTryAcquire(t *testing.T) {
	a, queued := queuedAdmission(1)
	ctx := context.Background()
	if !a.TryAcquire(agent) {
		t.Fatal("no slot taken from an idle admission")
	}
	wantStats(t, a, 1, 0)
	if a.TryAcquire(agent) {
		t.Fatal("a slot over the limit")
	}
	wantStats(t, a, 1, 0) // it did not join the line
	waiter := make(chan error, 1)
	go func() { waiter <- a.Acquire(ctx, agent, time.Hour) }()
	<-queued
	a.Release(agent)
	if a.TryAcquire(agent) {
		t.Fatal("tryAcquire took the slot of the caller in line")
	}
	if err := <-waiter; err != nil {
		t.Fatal(err)
	}
	a.Release(agent)
	wantStats(t, a, 0, 0)
}

// TestAdmissionCancel: a caller whose context ends leaves the line at
// once, and the next slot goes to the caller behind it.
func TestAdmissionCancel(t *testing.T) {
	a, queued := queuedAdmission(1)
	bg := context.Background()
	if err := a.Acquire(bg, agent, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	gone := make(chan error, 1)
	go func() { gone <- a.Acquire(ctx, agent, time.Hour) }()
	<-queued
	behind := make(chan error, 1)
	go func() { behind <- a.Acquire(bg, agent, time.Hour) }()
	<-queued
	wantStats(t, a, 1, 2)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	wantStats(t, a, 1, 1)
	a.Release(agent)
	if err := <-behind; err != nil {
		t.Fatalf("the caller behind the cancelled one: %v", err)
	}
	a.Release(agent)
	wantStats(t, a, 0, 0)
}

// TestAdmissionTimeout: with every slot held, a caller gives up after its
// queue timeout with ErrBusy and leaves the line.
func TestAdmissionTimeout(t *testing.T) {
	a := NewSlots(1)
	bg := context.Background()
	if err := a.Acquire(bg, agent, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Acquire(bg, agent, time.Millisecond); !errors.Is(err, ErrBusy) {
		t.Fatalf("over the cap: %v, want ErrBusy", err)
	}
	wantStats(t, a, 1, 0)
	a.Release(agent)
	wantStats(t, a, 0, 0)
}

// TestAdmissionHandoffRace: a slot handed over just as its waiter's wait
// ends (context cancelled or timed out) is neither lost nor doubled.
func TestAdmissionHandoffRace(t *testing.T) {
	for _, cancelled := range []bool{true, false} {
		for range 200 {
			a, queued := queuedAdmission(1)
			bg := context.Background()
			if err := a.Acquire(bg, agent, 0); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(bg)
			timeout := time.Hour
			if !cancelled {
				timeout = time.Microsecond
			}
			res := make(chan error, 1)
			go func() { res <- a.Acquire(ctx, agent, timeout) }()
			<-queued
			done := make(chan struct{})
			go func() {
				if cancelled {
					cancel()
				}
				close(done)
			}()
			a.Release(agent)
			if err := <-res; err == nil {
				a.Release(agent)
			}
			<-done
			cancel()
			wantStats(t, a, 0, 0)
		}
	}
}

// BenchmarkAdmission: a slot taken and given back, free (every execute
// call takes one) and with callers of three principals queueing for two
// slots. Figures: docs/performance.md.
func BenchmarkAdmission(b *testing.B) {
	ctx := context.Background()
	b.Run("free", func(b *testing.B) {
		a := NewSlots(4)
		for b.Loop() {
			if err := a.Acquire(ctx, agent, time.Hour); err != nil {
				b.Fatal(err)
			}
			a.Release(agent)
		}
	})
	b.Run("contended", func(b *testing.B) {
		a := NewSlots(2)
		var n atomic.Int32
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			p := fmt.Sprint("p", n.Add(1)%3)
			for pb.Next() {
				if err := a.Acquire(ctx, p, time.Hour); err != nil {
					b.Error(err)
					return
				}
				a.Release(p)
			}
		})
	})
}
