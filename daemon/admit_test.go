//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/escapetest"
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

// agent is the principal of the tests of one principal.
const agent = "agent"

func wantStats(t *testing.T, a *admission, running, waiting int) {
	t.Helper()
	if r, w := a.stats(); r != running || w != waiting {
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
		if err := a.acquire(ctx, agent, 0); err != nil {
			t.Fatalf("a free slot was refused: %v", err)
		}
	}
	const n = 8
	admitted := make(chan int, n)
	failed := make(chan error, n)
	for i := range n {
		go func() {
			if err := a.acquire(ctx, agent, time.Hour); err != nil {
				failed <- err
				return
			}
			admitted <- i
		}()
		<-queued // i is in line before i+1 starts
	}
	wantStats(t, a, 2, n)
	for i := range n {
		a.release(agent)
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
	a.release(agent)
	a.release(agent)
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
				if err := a.acquire(ctx, p, 0); err != nil {
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
					if err := a.acquire(ctx, p, time.Hour); err != nil {
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
				a.release(p)
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
					a.release(p)
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
		if !a.tryAcquire(p) {
			t.Fatalf("no free slot for %s", p)
		}
	}
	bob := make(chan error, 1)
	go func() { bob <- a.acquire(ctx, "bob", time.Hour) }()
	<-queued
	for _, p := range []string{"alice", "bob", "carol"} {
		if a.tryAcquire(p) {
			t.Fatalf("%s took a slot over the cap", p)
		}
	}
	a.release("alice")
	for _, p := range []string{"alice", "bob", "carol"} {
		if a.tryAcquire(p) {
			t.Fatalf("%s took the slot given to bob", p)
		}
	}
	if err := <-bob; err != nil {
		t.Fatal(err)
	}
	a.release("bob")
	if !a.tryAcquire("carol") {
		t.Fatal("a free slot was refused")
	}
	a.release("carol")
	a.release("alice")
	wantStats(t, a, 0, 0)
}

// TestAdmissionIdlePrincipals: a principal done with its slots leaves no
// entry behind beyond keepIdle of them.
func TestAdmissionIdlePrincipals(t *testing.T) {
	a := newAdmission(1)
	for i := range 4 * keepIdle {
		p := fmt.Sprint("p", i)
		if !a.tryAcquire(p) {
			t.Fatal("no free slot")
		}
		a.release(p)
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
	if err := a.acquire(ctx, agent, 0); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- a.acquire(ctx, agent, time.Hour) }()
	<-queued
	a.release(agent)
	// The slot is already the waiter's, whether or not it has woken up.
	if err := a.acquire(ctx, agent, 0); !errors.Is(err, errBusy) {
		t.Fatalf("a newcomer took the slot of the caller in line: %v", err)
	}
	<-queued // the newcomer's own (timed-out) turn in line
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wantStats(t, a, 1, 0)
	a.release(agent)
	wantStats(t, a, 0, 0)
}

// TestAdmissionTryAcquire: tryAcquire (a cold box started while its
// decision syncs) takes a free slot, never queues, and never passes a
// caller in line, even when a slot has just been given back to it.
func TestAdmissionTryAcquire(t *testing.T) {
	a, queued := queuedAdmission(1)
	ctx := context.Background()
	if !a.tryAcquire(agent) {
		t.Fatal("no slot taken from an idle admission")
	}
	wantStats(t, a, 1, 0)
	if a.tryAcquire(agent) {
		t.Fatal("a slot over the limit")
	}
	wantStats(t, a, 1, 0) // it did not join the line
	waiter := make(chan error, 1)
	go func() { waiter <- a.acquire(ctx, agent, time.Hour) }()
	<-queued
	a.release(agent)
	if a.tryAcquire(agent) {
		t.Fatal("tryAcquire took the slot of the caller in line")
	}
	if err := <-waiter; err != nil {
		t.Fatal(err)
	}
	a.release(agent)
	wantStats(t, a, 0, 0)
}

// TestAdmissionCancel: a caller whose context ends leaves the line at
// once, and the next slot goes to the caller behind it.
func TestAdmissionCancel(t *testing.T) {
	a, queued := queuedAdmission(1)
	bg := context.Background()
	if err := a.acquire(bg, agent, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	gone := make(chan error, 1)
	go func() { gone <- a.acquire(ctx, agent, time.Hour) }()
	<-queued
	behind := make(chan error, 1)
	go func() { behind <- a.acquire(bg, agent, time.Hour) }()
	<-queued
	wantStats(t, a, 1, 2)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	wantStats(t, a, 1, 1)
	a.release(agent)
	if err := <-behind; err != nil {
		t.Fatalf("the caller behind the cancelled one: %v", err)
	}
	a.release(agent)
	wantStats(t, a, 0, 0)
}

// TestAdmissionTimeout: with every slot held, a caller gives up after its
// queue timeout with errBusy and leaves the line.
func TestAdmissionTimeout(t *testing.T) {
	a := newAdmission(1)
	bg := context.Background()
	if err := a.acquire(bg, agent, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.acquire(bg, agent, time.Millisecond); !errors.Is(err, errBusy) {
		t.Fatalf("over the cap: %v, want errBusy", err)
	}
	wantStats(t, a, 1, 0)
	a.release(agent)
	wantStats(t, a, 0, 0)
}

// TestAdmissionHandoffRace: a slot handed over just as its waiter's wait
// ends (context cancelled or timed out) is neither lost nor doubled.
func TestAdmissionHandoffRace(t *testing.T) {
	for _, cancelled := range []bool{true, false} {
		for range 200 {
			a, queued := queuedAdmission(1)
			bg := context.Background()
			if err := a.acquire(bg, agent, 0); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(bg)
			timeout := time.Hour
			if !cancelled {
				timeout = time.Microsecond
			}
			res := make(chan error, 1)
			go func() { res <- a.acquire(ctx, agent, timeout) }()
			<-queued
			done := make(chan struct{})
			go func() {
				if cancelled {
					cancel()
				}
				close(done)
			}()
			a.release(agent)
			if err := <-res; err == nil {
				a.release(agent)
			}
			<-done
			cancel()
			wantStats(t, a, 0, 0)
		}
	}
}

// streamCall streams a call of tool from c in the background. started is
// closed once its command has printed "started" (it then holds a container
// slot); cancel makes the client go away; done gets the result.
func streamCall(c *client.Client, tool string) (cancel func(), started <-chan struct{}, done <-chan *api.CallResult) {
	ctx, cancel := context.WithCancel(context.Background())
	st := make(chan struct{})
	res := make(chan *api.CallResult, 1)
	go func() {
		var once sync.Once
		r, err := c.Stream(ctx, api.CallRequest{Tool: tool}, func(e api.Event) error {
			if e.Event == api.EventOutput && strings.Contains(e.Data, "started") {
				once.Do(func() { close(st) })
			}
			return nil
		})
		if err != nil {
			r = &api.CallResult{Reason: api.Reason("client: " + err.Error())}
		}
		res <- r
	}()
	return cancel, st, res
}

// holdCall is streamCall that returns once the command has started.
func holdCall(t *testing.T, c *client.Client, tool string) (cancel func(), done <-chan *api.CallResult) {
	t.Helper()
	cancel, started, res := streamCall(c, tool)
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
		cancel, held := holdCall(t, h.c, "hold")
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
		cancel, held := holdCall(t, h.c, "hold")
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

// TestContainerAdmissionPrincipals, over the socket with two container
// slots: alice fills both with commands that run until cancelled and
// queues four more; bob's one call is served with the first slot given
// back, before alice's queued calls, and does not end busy. Alice's queue
// is then served in its own order. With one FIFO for everyone bob waited
// behind alice's queue and ended busy (docs/security.md, The third
// review).
func TestContainerAdmissionPrincipals(t *testing.T) {
	const aliceUID, bobUID = 4242, 4243
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	tool := func(name, script string) string {
		return fmt.Sprintf(`%q:{"operation":"execute","commands":[["sh","-c",%q]],"mounts":["workspace/src"],"pool":0,"timeout_ms":120000}`, name, script)
	}
	m := writeManifest(t, fx.Base, fmt.Sprintf(`{"schema_version":1,
	  "principals":{"alice":{"uids":[%d],"tools":["hold"]},"bob":{"uids":[%d],"tools":["quick"]}},
	  "tools":{%s,%s}}`, aliceUID, bobUID, tool("hold", "echo started; sleep 120"), tool("quick", "echo second")))
	runDir := t.TempDir()
	t.Cleanup(func() { // registered first, so it runs after the daemon has stopped
		if left := sandbox.Leftovers(runDir); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	queued := make(chan struct{}, 16)
	// A queue timeout far beyond the test's own waits: bob ends busy only
	// if the slot went to someone else.
	h := start(t, m, securefs.ModeAuto, func(c *Config) {
		c.RunDir, c.MaxContainers, c.QueueTimeout = runDir, 2, 20*time.Second
		c.slotQueued = func() { queued <- struct{}{} }
	})
	alice, bob := clientAs(h.socket, aliceUID), clientAs(h.socket, bobUID)
	defer alice.Close()
	defer bob.Close()

	type held struct {
		cancel  func()
		started <-chan struct{}
		done    <-chan *api.CallResult
		ended   bool
	}
	var calls []*held
	end := func(c *held) {
		c.cancel()
		if !c.ended {
			<-c.done
			c.ended = true
		}
	}
	defer func() { // every alice call ends before the daemon stops
		for _, c := range calls {
			end(c)
		}
	}()
	for range 2 {
		cancel, done := holdCall(t, alice, "hold")
		calls = append(calls, &held{cancel: cancel, done: done})
	}
	waiting := make([]*held, 4)
	for i := range waiting {
		cancel, started, done := streamCall(alice, "hold")
		waiting[i] = &held{cancel: cancel, started: started, done: done}
		calls = append(calls, waiting[i])
		<-queued // in line before the next comes
	}
	quick := make(chan *api.CallResult, 1)
	go func() {
		r, err := bob.Call(context.Background(), api.CallRequest{Tool: "quick"})
		if err != nil {
			r = &api.CallResult{Reason: api.Reason("client: " + err.Error())}
		}
		quick <- r
	}()
	<-queued // bob waits behind alice's four

	end(calls[0]) // alice's client goes away: one of her slots is given back
	r := <-quick
	if !r.OK || r.Reason != api.ReasonAllowed || r.Output == nil || *r.Output != "second\n" {
		t.Fatalf("bob's call with alice's queue ahead: %+v (output %v); want it served with the first slot given back", r, r.Output)
	}
	// Bob's slot goes to alice's first queued call, and to no other: her
	// second running call still holds the other slot.
	select {
	case <-waiting[0].started:
	case r := <-waiting[0].done:
		t.Fatalf("alice's first queued call: %+v", r)
	}
	for i, w := range waiting[1:] {
		select {
		case <-w.started:
			t.Fatalf("alice's queued call %d started before her first", i+2)
		default:
		}
	}
}

// BenchmarkAdmission: a slot taken and given back, free (every execute
// call takes one) and with callers of three principals queueing for two
// slots. Figures: docs/performance.md.
func BenchmarkAdmission(b *testing.B) {
	ctx := context.Background()
	b.Run("free", func(b *testing.B) {
		a := newAdmission(4)
		for b.Loop() {
			if err := a.acquire(ctx, agent, time.Hour); err != nil {
				b.Fatal(err)
			}
			a.release(agent)
		}
	})
	b.Run("contended", func(b *testing.B) {
		a := newAdmission(2)
		var n atomic.Int32
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			p := fmt.Sprint("p", n.Add(1)%3)
			for pb.Next() {
				if err := a.acquire(ctx, p, time.Hour); err != nil {
					b.Error(err)
					return
				}
				a.release(p)
			}
		})
	})
}
