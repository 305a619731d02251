package daemon

import (
	"context"
	"errors"
	"testing"
	"time"
)

// queuedAdmission returns an admission that signals each caller joining
// its queue, so a test can line callers up in a known order.
func queuedAdmission(limit int) (*admission, <-chan struct{}) {
	a := newAdmission(limit)
	q := make(chan struct{}, 64)
	a.queued = func() { q <- struct{}{} }
	return a, q
}

func wantStats(t *testing.T, a *admission, running, waiting int) {
	t.Helper()
	if r, w := a.stats(); r != running || w != waiting {
		t.Fatalf("running %d waiting %d, want %d and %d", r, w, running, waiting)
	}
}

// TestAdmissionFIFO: callers over the cap are admitted in the order they
// came, one per slot given back.
func TestAdmissionFIFO(t *testing.T) {
	a, queued := queuedAdmission(2)
	ctx := context.Background()
	for range 2 {
		if err := a.acquire(ctx, 0); err != nil {
			t.Fatalf("a free slot was refused: %v", err)
		}
	}
	const n = 8
	admitted := make(chan int, n)
	failed := make(chan error, n)
	for i := range n {
		go func() {
			if err := a.acquire(ctx, time.Hour); err != nil {
				failed <- err
				return
			}
			admitted <- i
		}()
		<-queued // i is in line before i+1 starts
	}
	wantStats(t, a, 2, n)
	for i := range n {
		a.release()
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
	a.release()
	a.release()
	wantStats(t, a, 0, 0)
}

// TestAdmissionNoOvertaking: a slot given back goes to the first in line,
// never to a caller that arrives as it is freed.
func TestAdmissionNoOvertaking(t *testing.T) {
	a, queued := queuedAdmission(1)
	ctx := context.Background()
	if err := a.acquire(ctx, 0); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- a.acquire(ctx, time.Hour) }()
	<-queued
	a.release()
	// The slot is already the waiter's, whether or not it has woken up.
	if err := a.acquire(ctx, 0); !errors.Is(err, errBusy) {
		t.Fatalf("a newcomer took the slot of the caller in line: %v", err)
	}
	<-queued // the newcomer's own (timed-out) turn in line
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wantStats(t, a, 1, 0)
	a.release()
	wantStats(t, a, 0, 0)
}

// TestAdmissionCancel: a caller whose context ends leaves the line at
// once, and the next slot goes to the caller behind it.
func TestAdmissionCancel(t *testing.T) {
	a, queued := queuedAdmission(1)
	bg := context.Background()
	if err := a.acquire(bg, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	gone := make(chan error, 1)
	go func() { gone <- a.acquire(ctx, time.Hour) }()
	<-queued
	behind := make(chan error, 1)
	go func() { behind <- a.acquire(bg, time.Hour) }()
	<-queued
	wantStats(t, a, 1, 2)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	wantStats(t, a, 1, 1)
	a.release()
	if err := <-behind; err != nil {
		t.Fatalf("the caller behind the cancelled one: %v", err)
	}
	a.release()
	wantStats(t, a, 0, 0)
}

// TestAdmissionTimeout: with every slot held, a caller gives up after its
// queue timeout with errBusy and leaves the line.
func TestAdmissionTimeout(t *testing.T) {
	a := newAdmission(1)
	bg := context.Background()
	if err := a.acquire(bg, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.acquire(bg, time.Millisecond); !errors.Is(err, errBusy) {
		t.Fatalf("over the cap: %v, want errBusy", err)
	}
	wantStats(t, a, 1, 0)
	a.release()
	wantStats(t, a, 0, 0)
}

// TestAdmissionHandoffRace: a slot handed over just as its waiter's wait
// ends (context cancelled or timed out) is neither lost nor doubled.
func TestAdmissionHandoffRace(t *testing.T) {
	for _, cancelled := range []bool{true, false} {
		for range 200 {
			a, queued := queuedAdmission(1)
			bg := context.Background()
			if err := a.acquire(bg, 0); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(bg)
			timeout := time.Hour
			if !cancelled {
				timeout = time.Microsecond
			}
			res := make(chan error, 1)
			go func() { res <- a.acquire(ctx, timeout) }()
			<-queued
			done := make(chan struct{})
			go func() {
				if cancelled {
					cancel()
				}
				close(done)
			}()
			a.release()
			if err := <-res; err == nil {
				a.release()
			}
			<-done
			cancel()
			wantStats(t, a, 0, 0)
		}
	}
}
