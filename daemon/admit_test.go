//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
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

// TestAdmissionTryAcquire: tryAcquire (a cold box started while its
// decision syncs) takes a free slot, never queues, and never passes a
// caller in line, even when a slot has just been given back to it.
func TestAdmissionTryAcquire(t *testing.T) {
	a, queued := queuedAdmission(1)
	ctx := context.Background()
	if !a.tryAcquire() {
		t.Fatal("no slot taken from an idle admission")
	}
	wantStats(t, a, 1, 0)
	if a.tryAcquire() {
		t.Fatal("a slot over the limit")
	}
	wantStats(t, a, 1, 0) // it did not join the line
	waiter := make(chan error, 1)
	go func() { waiter <- a.acquire(ctx, time.Hour) }()
	<-queued
	a.release()
	if a.tryAcquire() {
		t.Fatal("tryAcquire took the slot of the caller in line")
	}
	if err := <-waiter; err != nil {
		t.Fatal(err)
	}
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

// holdCall streams a call of tool in the background and returns once its
// command has printed "started": it then holds a container slot. cancel
// makes the client go away; done gets the result.
func holdCall(t *testing.T, h *harness, tool string) (cancel func(), done <-chan *api.CallResult) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	res := make(chan *api.CallResult, 1)
	go func() {
		var once sync.Once
		r, err := h.c.Stream(ctx, api.CallRequest{Tool: tool}, func(e api.Event) error {
			if e.Event == api.EventOutput && strings.Contains(e.Data, "started") {
				once.Do(func() { close(started) })
			}
			return nil
		})
		if err != nil {
			r = &api.CallResult{Reason: api.Reason("client: " + err.Error())}
		}
		res <- r
	}()
	select {
	case <-started:
	case r := <-res:
		cancel()
		t.Fatalf("%s ended before it started: %+v", tool, r)
	}
	return cancel, res
}

// ledgerResult waits until the ledger holds the result record of callID.
func ledgerResult(t *testing.T, h *harness, callID string) map[string]any {
	t.Helper()
	var found map[string]any
	if err := testutil.Poll(10*time.Second, func() error {
		for _, line := range bytes.Split(h.ledger(), []byte("\n")) {
			var rec map[string]any
			if json.Unmarshal(line, &rec) == nil && rec["kind"] == "result" && rec["call_id"] == callID {
				found = rec
				return nil
			}
		}
		return errors.New("not yet")
	}); err != nil {
		t.Fatalf("no result record for %s in the ledger", callID)
	}
	return found
}

// TestContainerAdmission, over the socket with one container slot: a call
// that finds the slot taken for its whole queue timeout ends busy; with a
// longer queue timeout it runs once the slot is free, and the wait is not
// counted in its timeout_ms; a queued call whose client goes away leaves
// the queue.
func TestContainerAdmission(t *testing.T) {
	const quickTimeout = 1500 * time.Millisecond
	_, m := execFixture(t, []probeTool{
		{name: "hold", argv: []string{"sh", "-c", "echo started; sleep 3"}},
		{name: "quick", argv: []string{"sh", "-c", "sleep 0.5; echo second"}, extra: fmt.Sprintf(`,"timeout_ms":%d`, quickTimeout.Milliseconds())},
	})
	runDir := t.TempDir()
	t.Cleanup(func() { // registered first, so it runs after the daemons have stopped
		if left := sandbox.Leftovers(runDir); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})

	t.Run("busy", func(t *testing.T) {
		const queue = 300 * time.Millisecond
		h := start(t, m, securefs.ModeAuto, func(c *Config) {
			c.RunDir, c.MaxContainers, c.QueueTimeout = runDir, 1, queue
		})
		cancel, held := holdCall(t, h, "hold")
		begin := time.Now()
		res, body := h.call("quick", map[string]any{})
		waited := time.Since(begin)
		if res.Verdict != api.VerdictAllow || res.Reason != api.ReasonBusy || res.OK || res.ExitCode != nil || res.Output != nil {
			t.Fatalf("over the cap: %s; want allow/busy, not ok, nothing run", body)
		}
		if waited < queue {
			t.Fatalf("busy after %v, before its queue timeout of %v", waited, queue)
		}
		t.Logf("busy after %v (queue timeout %v)", waited, queue)
		if rec := ledgerResult(t, h, res.CallID); rec["reason"] != string(api.ReasonBusy) {
			t.Fatalf("ledger result: %v", rec)
		}
		cancel()
		<-held
	})

	t.Run("queued", func(t *testing.T) {
		h := start(t, m, securefs.ModeAuto, func(c *Config) {
			c.RunDir, c.MaxContainers, c.QueueTimeout = runDir, 1, 30*time.Second
		})
		cancel, held := holdCall(t, h, "hold")
		defer cancel()
		// A queued call whose client leaves once it is decided leaves the
		// queue: else the slot would go to it, and the next call would
		// never run.
		decided := make(chan string, 1)
		_, err := h.c.Stream(context.Background(), api.CallRequest{Tool: "quick"}, func(e api.Event) error {
			decided <- e.CallID
			return errors.New("leaving")
		})
		if err == nil || !strings.Contains(err.Error(), "leaving") {
			t.Fatalf("stream: %v", err)
		}
		gone := <-decided
		if rec := ledgerResult(t, h, gone); rec["reason"] != string(api.ReasonCancelled) {
			t.Fatalf("the call that left: %v", rec)
		}
		begin := time.Now()
		res, body := h.call("quick", map[string]any{})
		took := time.Since(begin)
		if !res.OK || res.Reason != api.ReasonAllowed || *res.Output != "second\n" {
			t.Fatalf("queued call: %s", body)
		}
		if r := <-held; !r.OK {
			t.Fatalf("hold: %+v", r)
		}
		// It waited for hold's remaining seconds, then ran its 0.5 s:
		// more than its own timeout_ms in all, without timing out.
		if took <= quickTimeout {
			t.Fatalf("queued call took %v; it should have waited for the slot", took)
		}
		t.Logf("queued call: %v in all (timeout_ms %d), duration_ms %.0f", took, quickTimeout.Milliseconds(), res.DurationMS)
	})
}
