//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
)

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
