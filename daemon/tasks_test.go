//go:build linux

package daemon

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
)

const intruderUID = 4343

// checkedRunDir is a run dir of the test's own, checked for leftovers
// (containers, cgroups, mounts, rootfs dirs) when the test ends.
func checkedRunDir(t *testing.T) string {
	t.Helper()
	runDir := t.TempDir()
	t.Cleanup(func() {
		if left := sandbox.Leftovers(runDir); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	return runDir
}

// TestTaskBelongsToPrincipal (review class 2): task ids are per
// principal. A principal with no tools that names another's task in a
// denied call does not become its owner: its cancel is 403, the other's
// running command goes on, and pre-cancelling an id the other will use
// later does not deny the other's calls. The other may cancel its own,
// the approver any.
func TestTaskBelongsToPrincipal(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	if err := os.Chmod(fx.Base, 0o755); err != nil {
		t.Fatal(err)
	}
	m := writeManifest(t, fx.Base, `{"schema_version":1,
	  "principals":{"agent":{"uids":[4242],"tools":["*"]},"intruder":{"uids":[4343],"tools":[]},
	                "ops":{"uids":[0],"approver":true,"tools":[]}},
	  "tools":{"read_src":{"operation":"read","roots":["workspace/src"]},
	           "sleeper":{"operation":"execute","commands":[["sleep","30"]],"timeout_ms":60000,"pool":0}}}`)
	runDir := checkedRunDir(t)
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.RunDir = runDir })
	agent, intruder, ops := clientAs(h.socket, agentUID), clientAs(h.socket, intruderUID), clientAs(h.socket, 0)
	defer agent.Close()
	defer intruder.Close()
	defer ops.Close()
	ctx := context.Background()

	sleeper := startStream(agent, ctx, api.CallRequest{Tool: "sleeper", Task: "build-42"})
	if ev := sleeper.next(t, "the sleeper's decision"); ev.Verdict != api.VerdictAllow {
		t.Fatalf("sleeper: %s", ev.Raw)
	}
	waitFor(t, "the sleeper's container", func() bool { return sandbox.Containers(runDir) > 0 })

	// The intruder names the task in a call of its own: denied, and no
	// ownership comes of it.
	res, err := intruder.Call(ctx, api.CallRequest{Tool: "sleeper", Task: "build-42"})
	if err != nil || res.Verdict != api.VerdictDeny || res.Reason != api.ReasonPrincipalNotAllowed {
		t.Fatalf("intruder's call: %+v %v", res, err)
	}
	for _, task := range []string{"build-42", "deploy-7"} {
		if _, err := intruder.CancelTask(ctx, task); !isStatus(err, 403) {
			t.Fatalf("intruder cancels %s: %v, want 403", task, err)
		}
	}
	// Pre-cancelling deploy-7 left no trace: the agent's first call with it
	// runs.
	if res, err := agent.Call(ctx, api.CallRequest{Tool: "read_src", Args: pathArgs("workspace/src/a.py"), Task: "deploy-7"}); err != nil || !res.OK {
		t.Fatalf("agent's deploy-7 call after the intruder's cancel: %+v %v", res, err)
	}
	if strings.Contains(string(h.ledger()), `"kind":"task_cancelled"`) {
		t.Fatal("a refused cancel was recorded as a cancel")
	}
	select {
	case <-sleeper.done:
		t.Fatalf("the agent's command ended after the intruder's cancel: %+v %v", sleeper.res, sleeper.err)
	default:
	}
	// A task the agent named only in a denied call is not its to cancel
	// either: ownership comes from an allowed call.
	if res, err := agent.Call(ctx, api.CallRequest{Tool: "nope", Task: "t-denied"}); err != nil || res.Verdict != api.VerdictDeny {
		t.Fatalf("agent's denied call: %+v %v", res, err)
	}
	if _, err := agent.CancelTask(ctx, "t-denied"); !isStatus(err, 403) {
		t.Fatalf("agent cancels a task only a denied call used: %v, want 403", err)
	}

	// The approver cancels build-42 of every principal: the sleeper ends.
	tc, err := ops.CancelTask(ctx, "build-42")
	if err != nil || tc.Ended != 1 {
		t.Fatalf("approver's cancel: %+v %v", tc, err)
	}
	if r := sleeper.wait(t); r.Reason != api.ReasonTaskCancelled {
		t.Fatalf("sleeper after the approver's cancel: %+v", r)
	}
	// The agent's own cancel of its own task is allowed.
	if tc, err := agent.CancelTask(ctx, "deploy-7"); err != nil || tc.Ended != 0 {
		t.Fatalf("agent cancels its own task: %+v %v", tc, err)
	}
	if res, err := agent.Call(ctx, api.CallRequest{Tool: "read_src", Args: pathArgs("workspace/src/a.py"), Task: "deploy-7"}); err != nil || res.Reason != api.ReasonTaskCancelled {
		t.Fatalf("agent's call of its cancelled task: %+v %v", res, err)
	}
	// The same id is a different task for another principal: the
	// intruder's calls with "deploy-7" are not task_cancelled (they are
	// denied for having no tools).
	if res, err := intruder.Call(ctx, api.CallRequest{Tool: "read_src", Args: pathArgs("workspace/src/a.py"), Task: "deploy-7"}); err != nil || res.Reason != api.ReasonPrincipalNotAllowed {
		t.Fatalf("intruder's deploy-7: %+v %v", res, err)
	}
}

// TestUIDRangeExhaustedIsBusy: with every container uid of the range in
// use, another execute call ends busy (nothing ran, a retry may succeed),
// not internal_error.
func TestUIDRangeExhaustedIsBusy(t *testing.T) {
	_, m := lifecycleFixture(t, "")
	runDir := t.TempDir()
	h := start(t, m, securefs.ModeAuto, func(c *Config) {
		c.RunDir = runDir
		c.UIDRange = sandbox.IDRange{First: 0x7F030000, Last: 0x7F030001} // the smallest range: two ids
	})
	agent := clientAs(h.socket, agentUID)
	defer agent.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var running []*streamed
	for i := range 2 {
		s := startStream(agent, ctx, api.CallRequest{Tool: "sleeper"})
		if ev := s.next(t, "a sleeper's decision"); ev.Verdict != api.VerdictAllow {
			t.Fatalf("sleeper %d: %s", i, ev.Raw)
		}
		waitFor(t, "the sleeper's container", func() bool { return sandbox.Containers(runDir) > i })
		running = append(running, s)
	}
	res, err := agent.Call(context.Background(), api.CallRequest{Tool: "sleeper"})
	if err != nil || res.Verdict != api.VerdictAllow || res.OK || res.Reason != api.ReasonBusy {
		t.Fatalf("a third sleeper with the uid range used up: %+v %v, want allow, busy", res, err)
	}
	cancel()
	for _, s := range running {
		<-s.done
	}
}

// TestReview4TaskWithDotsCancellable: a task id may hold any character but
// a control one, so a task named ".." or "a..b" must be cancellable like
// any other. The router refused every path holding "..", so such a task
// could not be cancelled: its parked calls stayed parked and its running
// ones ran on, whoever asked.
// docs/security.md, "The fourth review"
func TestReview4TaskWithDotsCancellable(t *testing.T) {
	_, m := lifecycleFixture(t, "")
	h := start(t, m, securefs.ModeAuto)
	agent := clientAs(h.socket, agentUID)
	defer agent.Close()
	ctx := context.Background()
	for _, task := range []string{"..", "a..b", "../x"} {
		parked := startStream(agent, ctx, api.CallRequest{Tool: "ask_read", Args: pathArgs("workspace/src/a.py"), Task: task})
		if ev := parked.next(t, "the parked decision"); ev.Verdict != api.VerdictPending {
			t.Fatalf("task %q: parked: %s", task, ev.Raw)
		}
		tc, err := agent.CancelTask(ctx, task)
		if err != nil || tc.Ended != 1 {
			t.Errorf("task %q: cancel: %+v %v", task, tc, err)
			if ap, err := h.c.Approvals(ctx); err == nil { // deny it, so that the stream ends
				for _, a := range ap.Approvals {
					h.c.Decide(ctx, a.ApprovalID, false, "")
				}
			}
		}
		if r := parked.wait(t); err == nil && r.Reason != api.ReasonTaskCancelled {
			t.Errorf("task %q: parked after cancel: %+v", task, r)
		}
	}
}
