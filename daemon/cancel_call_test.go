//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
)

// TestCancelCallByID: POST /v1/calls/{id}/cancel ends one call with reason
// cancelled. Another principal's cancel, like an unknown id, is a 404 and
// the call goes on; its own principal's cancel kills the command (the
// container goes, the ledger result says cancelled and by whom); an
// approver may cancel anyone's; a parked call ends cancelled; a write
// cancelled between its decision and its commit does not commit.
func TestCancelCallByID(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	if err := os.Chmod(fx.Base, 0o755); err != nil {
		t.Fatal(err)
	}
	m := writeManifest(t, fx.Base, `{"schema_version":1,
	  "principals":{"agent":{"uids":[4242],"tools":["*"]},"intruder":{"uids":[4343],"tools":["*"]},
	                "ops":{"uids":[0],"approver":true,"tools":[]}},
	  "tools":{"write_src":{"operation":"write","roots":["workspace/src"]},
	           "gated":{"operation":"read","roots":["workspace/src"],"approval":"human"},
	           "sleeper":{"operation":"execute","commands":[["sleep","30"]],"timeout_ms":60000,"pool":0}}}`)
	runDir := checkedRunDir(t)
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.RunDir = runDir })
	agent, intruder, ops := clientAs(h.socket, agentUID), clientAs(h.socket, intruderUID), clientAs(h.socket, 0)
	defer agent.Close()
	defer intruder.Close()
	defer ops.Close()
	ctx := context.Background()

	resultRecord := func(id string) map[string]any {
		t.Helper()
		rec := ledgerResult(t, h, id)
		if rec["reason"] != string(api.ReasonCancelled) {
			t.Fatalf("ledger result of %s: %v, want reason cancelled", id, rec)
		}
		return rec
	}

	// The agent's own cancel kills its command; the intruder's does not.
	sleeper := startStream(agent, ctx, api.CallRequest{Tool: "sleeper"})
	ev := sleeper.next(t, "the sleeper's decision")
	if ev.Verdict != api.VerdictAllow {
		t.Fatalf("sleeper: %s", ev.Raw)
	}
	waitFor(t, "the sleeper's container", func() bool { return sandbox.Containers(runDir) > 0 })
	for _, id := range []string{ev.CallID, "c-unknown"} {
		if _, err := intruder.CancelCall(ctx, id); !isStatus(err, 404) {
			t.Fatalf("intruder cancels %s: %v, want 404", id, err)
		}
	}
	select {
	case <-sleeper.done:
		t.Fatalf("the sleeper ended after the intruder's cancel: %+v %v", sleeper.res, sleeper.err)
	default:
	}
	if cc, err := agent.CancelCall(ctx, ev.CallID); err != nil || cc.CallID != ev.CallID {
		t.Fatalf("agent cancels its call: %+v %v", cc, err)
	}
	if r := sleeper.wait(t); r.Reason != api.ReasonCancelled || r.OK || r.Verdict != api.VerdictAllow {
		t.Fatalf("sleeper after its cancel: %+v", r)
	}
	waitFor(t, "the cancelled command's container to go", func() bool { return sandbox.Containers(runDir) == 0 })
	if rec := resultRecord(ev.CallID); rec["detail"] != "cancelled by agent" {
		t.Fatalf("result record: %v", rec)
	}
	if _, err := agent.CancelCall(ctx, ev.CallID); !isStatus(err, 404) {
		t.Fatalf("cancel of an ended call: %v, want 404", err)
	}

	// An approver cancels the agent's call.
	sleeper = startStream(agent, ctx, api.CallRequest{Tool: "sleeper"})
	ev = sleeper.next(t, "the second sleeper's decision")
	if _, err := ops.CancelCall(ctx, ev.CallID); err != nil {
		t.Fatalf("approver cancels: %v", err)
	}
	if r := sleeper.wait(t); r.Reason != api.ReasonCancelled {
		t.Fatalf("sleeper after the approver's cancel: %+v", r)
	}
	resultRecord(ev.CallID)

	// A parked call ends cancelled, and is no longer waiting.
	gated := startStream(agent, ctx, api.CallRequest{Tool: "gated", Args: pathArgs("workspace/src/a.py")})
	ev = gated.next(t, "the gated call's pending decision")
	if ev.Verdict != api.VerdictPending {
		t.Fatalf("gated: %s", ev.Raw)
	}
	if _, err := agent.CancelCall(ctx, ev.CallID); err != nil {
		t.Fatalf("agent cancels its parked call: %v", err)
	}
	if r := gated.wait(t); r.Verdict != api.VerdictDeny || r.Reason != api.ReasonCancelled {
		t.Fatalf("parked call after its cancel: %+v", r)
	}
	if a, err := ops.Approvals(ctx); err != nil || len(a.Approvals) != 0 {
		t.Fatalf("approvals after the cancel: %+v %v", a, err)
	}

	// A write cancelled after its decision, before its commit, does not
	// commit.
	testHookBeforeCommit = func(c *call) {
		if _, err := agent.CancelCall(context.Background(), c.id); err != nil {
			t.Errorf("cancel before commit: %v", err)
		}
	}
	defer func() { testHookBeforeCommit = nil }()
	args, _ := json.Marshal(map[string]string{"path": "workspace/src/cancelled.txt", "content": "no"})
	res, err := agent.Call(ctx, api.CallRequest{Tool: "write_src", Args: args})
	if err != nil || res.Reason != api.ReasonCancelled || res.OK {
		t.Fatalf("write cancelled before its commit: %+v %v", res, err)
	}
	if _, err := os.Lstat(filepath.Join(fx.Base, "workspace/src/cancelled.txt")); !os.IsNotExist(err) {
		t.Fatalf("the cancelled write committed: %v", err)
	}
	resultRecord(res.CallID)
	if bytes.Contains(h.ledger(), []byte(`"reason":"internal_error"`)) {
		t.Fatal("a cancel was recorded as internal_error")
	}
}
