//go:build linux

package daemon

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// Approvers of scaleFixture, besides ops (uid 0, the harness's client):
// bob; carol, who may call self_read herself; dave, one principal of two
// uids.
const (
	bobUID   = 4250
	carolUID = 4251
	daveUID1 = 4252
	daveUID2 = 4253
)

// scaleFixture: agent (4242) calls everything; ops, bob, carol and dave
// approve (docs/security.md, "Approvals that scale").
func scaleFixture(t *testing.T) (base, manifest string) {
	t.Helper()
	testutil.RequireRoot(t)
	base = t.TempDir()
	testutil.Must(t, os.Chmod(base, 0o755))
	testutil.Must(t, os.MkdirAll(filepath.Join(base, "workspace/src/deploy"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(base, "workspace/src/a.py"), []byte("print(1)\n"), 0o644))
	manifest = writeManifest(t, base, `{"schema_version":1,
	  "principals":{"agent":{"uids":[4242],"tools":["*"]},
	                "ops":{"uids":[0],"approver":true,"tools":[]},
	                "bob":{"uids":[4250],"approver":true,"tools":[]},
	                "carol":{"uids":[4251],"approver":true,"tools":["self_read"]},
	                "dave":{"uids":[4252,4253],"approver":true,"tools":[]}},
	  "tools":{"two":{"operation":"read","roots":["workspace/src"],"approval":"human","approvers":2},
	           "self_read":{"operation":"read","roots":["workspace/src"],"approval":"human"},
	           "grant_read":{"operation":"read","roots":["workspace/src"],"approval":"human"},
	           "when_write":{"operation":"write","roots":["workspace/src"],"approval":"human","approval_when":{"paths":["deploy/**"]}},
	           "when_run":{"operation":"execute","commands":[["echo",{"rest":{"any":true}}]],"approval":"human","pool":0,
	                       "approval_when":{"commands":[["echo","push",{"rest":{"any":true}}]]}},
	           "when_post":{"operation":"post","webhooks":["http://localhost:9/hooks/*"],"schemes":["http"],"insecure_allow_private":true,
	                       "approval":"human","approval_when":{"urls":["http://localhost:9/hooks/prod"]}}}}`)
	return base, manifest
}

// ledgerRecords returns the ledger's records of kind for which keep says yes.
func ledgerRecords(t *testing.T, h *harness, kind string, keep func(*audit.Record) bool) []*audit.Record {
	t.Helper()
	var out []*audit.Record
	if err := audit.Read(bytes.NewReader(h.ledger()), func(r *audit.Record) error {
		if r.Kind == kind && keep(r) {
			out = append(out, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTwoApprovers: a call of a tool with approvers 2 waits after one
// approval (listed with who approved), is not approved twice by one
// principal (not even from its other uid), commits on the second
// distinct principal's approval, with every approver's note in its result
// and one ledger record per approver; one denial denies.
func TestTwoApprovers(t *testing.T) {
	_, m := scaleFixture(t)
	h := start(t, m, securefs.ModeAuto)
	agent, dave1, dave2, bob := clientAs(h.socket, agentUID), clientAs(h.socket, daveUID1), clientAs(h.socket, daveUID2), clientAs(h.socket, bobUID)
	for _, c := range []*client.Client{agent, dave1, dave2, bob} {
		defer c.Close()
	}
	ctx := context.Background()
	s := startStream(agent, ctx, api.CallRequest{Tool: "two", Args: pathArgs("workspace/src/a.py")})
	id := s.next(t, "pending").ApprovalID
	if id == "" {
		t.Fatal("no approval id")
	}
	o, err := dave1.Decide(ctx, id, true, "dave read it")
	if err != nil || o.Approved || !o.Waiting || o.Approvers != 2 || !slices.Equal(o.ApprovedBy, []string{"dave"}) {
		t.Fatalf("first approval: %+v %v", o, err)
	}
	list := waitListed(t, h, 1)
	if a := list[0]; a.ApprovalID != id || a.Approvers != 2 || !slices.Equal(a.ApprovedBy, []string{"dave"}) {
		t.Fatalf("listed after one approval: %+v", a)
	}
	// The same principal from its other uid: one principal, one vote.
	if _, err := dave2.Decide(ctx, id, true, ""); !isStatus(err, 409) || !strings.Contains(err.Error(), "has approved this call already") {
		t.Fatalf("dave's second approval: %v", err)
	}
	if _, err := dave1.Decide(ctx, id, true, ""); !isStatus(err, 409) {
		t.Fatalf("dave's approval again: %v", err)
	}
	if a := waitListed(t, h, 1)[0]; len(a.ApprovedBy) != 1 {
		t.Fatalf("a repeated approval counted: %+v", a)
	}
	o, err = h.c.Decide(ctx, id, true, "ops too")
	if err != nil || !o.Approved || o.Waiting || !slices.Equal(o.ApprovedBy, []string{"dave", "ops"}) {
		t.Fatalf("second approval: %+v %v", o, err)
	}
	res := s.wait(t)
	if res.Verdict != api.VerdictAllow || !res.OK || res.ApprovalNote != "dave: dave read it\nops: ops too" {
		t.Fatalf("result: %+v", res)
	}
	votes := ledgerRecords(t, h, audit.KindApproval, func(r *audit.Record) bool { return r.ApprovalID == id })
	var who []string
	for _, r := range votes {
		if r.Verdict != api.VerdictAllow {
			t.Errorf("approval record: %+v", r)
		}
		who = append(who, r.Principal.Name)
	}
	if !slices.Equal(who, []string{"dave", "ops"}) {
		t.Fatalf("approval records by %v, want dave then ops", who)
	}

	// One denial denies, whatever approvals came before.
	s = startStream(agent, ctx, api.CallRequest{Tool: "two", Args: pathArgs("workspace/src/a.py")})
	id = s.next(t, "pending").ApprovalID
	if o, err := bob.Decide(ctx, id, true, ""); err != nil || !o.Waiting {
		t.Fatalf("bob's approval: %+v %v", o, err)
	}
	if o, err := h.c.Decide(ctx, id, false, "not today"); err != nil || o.Approved {
		t.Fatalf("ops's denial: %+v %v", o, err)
	}
	if res := s.wait(t); res.Reason != api.ReasonApprovalDenied || res.ApprovalNote != "not today" {
		t.Fatalf("denied: %+v", res)
	}
}

// TestSelfApprovalRefused: an approver principal that calls a tool needing
// approval cannot approve that call (403, recorded); it stays parked
// until another approver decides it.
func TestSelfApprovalRefused(t *testing.T) {
	_, m := scaleFixture(t)
	h := start(t, m, securefs.ModeAuto)
	carol, bob := clientAs(h.socket, carolUID), clientAs(h.socket, bobUID)
	defer carol.Close()
	defer bob.Close()
	ctx := context.Background()
	s := startStream(carol, ctx, api.CallRequest{Tool: "self_read", Args: pathArgs("workspace/src/a.py")})
	id := s.next(t, "pending").ApprovalID
	_, err := carol.Decide(ctx, id, true, "mine, fine")
	if !isStatus(err, 403) || !strings.Contains(err.Error(), "may not approve a call of its own") {
		t.Fatalf("carol approving her own call: %v", err)
	}
	refused := ledgerRecords(t, h, audit.KindApproval, func(r *audit.Record) bool { return r.ApprovalID == id })
	if len(refused) != 1 || refused[0].Principal.Name != "carol" || refused[0].Reason != api.ReasonPrincipalNotAllowed ||
		!strings.HasPrefix(refused[0].Detail, "self-approval refused") {
		t.Fatalf("the refusal's record: %+v", refused)
	}
	if list := waitListed(t, h, 1); list[0].ApprovalID != id || len(list[0].ApprovedBy) != 0 {
		t.Fatalf("after the refusal: %+v", list)
	}
	if o, err := bob.Decide(ctx, id, true, ""); err != nil || !o.Approved {
		t.Fatalf("bob: %+v %v", o, err)
	}
	if res := s.wait(t); res.Verdict != api.VerdictAllow || !res.OK {
		t.Fatalf("approved by bob: %+v", res)
	}
}

// TestApprovalWhenParksOnlyMatching: with approval_when only the matching
// calls wait (a write beneath deploy/, "echo push …", a post to
// /hooks/prod); the others run at once under their own rule.
func TestApprovalWhenParksOnlyMatching(t *testing.T) {
	base, m := scaleFixture(t)
	h := start(t, m, securefs.ModeAuto)
	agent := clientAs(h.socket, agentUID)
	defer agent.Close()
	ctx := context.Background()
	call := func(tool string, args any) *api.CallResult {
		t.Helper()
		res, err := agent.Call(ctx, api.CallRequest{Tool: tool, Args: mustJSON(args)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := call("when_write", map[string]string{"path": "workspace/src/notes.txt", "content": "x"}); res.Verdict != api.VerdictAllow || !res.OK {
		t.Fatalf("a write outside deploy/: %+v", res)
	}
	if b, err := os.ReadFile(filepath.Join(base, "workspace/src/notes.txt")); err != nil || string(b) != "x" {
		t.Fatalf("not written: %q %v", b, err)
	}
	if res := call("when_run", map[string]any{"argv": []string{"echo", "status"}}); res.Verdict != api.VerdictAllow || res.Output == nil || *res.Output != "status\n" {
		t.Fatalf("echo status: %+v", res)
	}
	// An unmatched post is allowed and sent (nothing listens on port 9:
	// upstream_error, not a wait).
	if res := call("when_post", map[string]any{"url": "http://localhost:9/hooks/staging", "body": map[string]int{"n": 1}}); res.Verdict != api.VerdictAllow || res.Reason != api.ReasonUpstreamError {
		t.Fatalf("a post to staging: %+v", res)
	}
	for _, c := range []struct {
		tool string
		args any
	}{
		{"when_write", map[string]string{"path": "workspace/src/deploy/k8s.yaml", "content": "x"}},
		{"when_run", map[string]any{"argv": []string{"echo", "push", "origin"}}},
		{"when_post", map[string]any{"url": "http://localhost:9/hooks/prod", "body": map[string]int{"n": 1}}},
	} {
		s := startStream(agent, ctx, api.CallRequest{Tool: c.tool, Args: mustJSON(c.args)})
		ev := s.next(t, c.tool+" pending")
		if ev.Verdict != api.VerdictPending || ev.ApprovalID == "" {
			t.Fatalf("%s %v: %s, want it to wait", c.tool, c.args, ev.Raw)
		}
		if _, err := h.c.Decide(ctx, ev.ApprovalID, false, ""); err != nil {
			t.Fatal(err)
		}
		if res := s.wait(t); res.Reason != api.ReasonApprovalDenied {
			t.Fatalf("%s: %+v", c.tool, res)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "workspace/src/deploy/k8s.yaml")); !os.IsNotExist(err) {
		t.Fatalf("the denied write under deploy/ happened: %v", err)
	}
}

// fakeClock is a clock a test moves (grants and tokens expire by it, no sleeps).
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestGrant: an approval with a grant lets later calls of the same tool
// by the same principal in the same task run without waiting, each
// naming the grant in its decision record, until it expires (the clock
// moves; nothing sleeps); another task's calls still wait; a task cancel
// ends the task's grant even where the task id is used again.
func TestGrant(t *testing.T) {
	_, m := scaleFixture(t)
	clock := &fakeClock{t: time.Now()}
	h := start(t, m, securefs.ModeAuto, func(c *Config) {
		c.approvalClock = clock.now
		c.TaskTTL = time.Nanosecond // a cancelled task's id may be used again at once
	})
	agent := clientAs(h.socket, agentUID)
	defer agent.Close()
	ctx := context.Background()
	read := func(task string) *api.CallResult {
		t.Helper()
		res, err := agent.Call(ctx, api.CallRequest{Tool: "grant_read", Task: task, Args: pathArgs("workspace/src/a.py")})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// waits checks that a call in task parks, and denies it.
	waits := func(task, what string) {
		t.Helper()
		s := startStream(agent, ctx, api.CallRequest{Tool: "grant_read", Task: task, Args: pathArgs("workspace/src/a.py")})
		ev := s.next(t, what)
		if ev.Verdict != api.VerdictPending {
			t.Fatalf("%s: %s, want it to wait", what, ev.Raw)
		}
		if _, err := h.c.Decide(ctx, ev.ApprovalID, false, ""); err != nil {
			t.Fatalf("%s: %v (the call: %+v)", what, err, s.wait(t))
		}
		s.wait(t)
	}
	grantOnce := func(task string) *api.Grant {
		t.Helper()
		s := startStream(agent, ctx, api.CallRequest{Tool: "grant_read", Task: task, Args: pathArgs("workspace/src/a.py")})
		id := s.next(t, "pending").ApprovalID
		if _, err := h.c.DecideWith(ctx, id, api.ApprovalDecision{Approve: true, Grant: &api.GrantRequest{Minutes: 0}}); !isStatus(err, 400) {
			t.Fatalf("a grant of 0 minutes: %v", err)
		}
		o, err := h.c.DecideWith(ctx, id, api.ApprovalDecision{Approve: true, Note: "go ahead for a while", Grant: &api.GrantRequest{Minutes: 30}})
		if err != nil || !o.Approved || o.Grant == nil || o.Grant.Task != task || o.Grant.Principal != "agent" || o.Grant.Tool != "grant_read" {
			t.Fatalf("approve with a grant: %+v %v", o, err)
		}
		if res := s.wait(t); res.Verdict != api.VerdictAllow || res.ApprovalNote != "go ahead for a while" {
			t.Fatalf("the approved call: %+v", res)
		}
		return o.Grant
	}
	g := grantOnce("t1")
	if gr := ledgerRecords(t, h, audit.KindGrant, func(r *audit.Record) bool { return r.Grant == g.ID }); len(gr) != 1 || gr[0].Principal.Name != "ops" || gr[0].Task != "t1" {
		t.Fatalf("the grant's record: %+v", gr)
	}
	for i := 0; i < 2; i++ {
		res := read("t1")
		if res.Verdict != api.VerdictAllow || !res.OK {
			t.Fatalf("a call the grant covers: %+v", res)
		}
		dec := ledgerRecords(t, h, audit.KindDecision, func(r *audit.Record) bool { return r.CallID == res.CallID })
		if len(dec) != 1 || dec[0].Grant != g.ID || dec[0].Verdict != api.VerdictAllow {
			t.Fatalf("its decision record: %+v", dec)
		}
	}
	waits("t2", "another task's call")
	clock.add(29 * time.Minute)
	if res := read("t1"); res.Verdict != api.VerdictAllow {
		t.Fatalf("29 minutes on: %+v", res)
	}
	clock.add(time.Minute)
	waits("t1", "a call once the grant expired")

	// A task cancel ends the task's grant: the task id, used again once
	// its cancellation has passed (TaskTTL), has none.
	grantOnce("t3")
	if res := read("t3"); res.Verdict != api.VerdictAllow {
		t.Fatalf("under the second grant: %+v", res)
	}
	if _, err := agent.CancelTask(ctx, "t3"); err != nil {
		t.Fatal(err)
	}
	waits("t3", "a call after the task was cancelled")
}

// TestApprovalEventsToApprovers: a parked call is announced on GET
// /v1/events to approver followers (approval_parked, then
// approval_decided), never to the agent's stream.
func TestApprovalEventsToApprovers(t *testing.T) {
	base, m := scaleFixture(t)
	h := start(t, m, securefs.ModeAuto)
	agent := clientAs(h.socket, agentUID)
	defer agent.Close()
	ctx := context.Background()
	oev, odone := follow(h.c)
	aev, adone := follow(agent)
	nextEvent(t, oev, odone, "ops subscribed")
	nextEvent(t, aev, adone, "agent subscribed")
	s := startStream(agent, ctx, api.CallRequest{Tool: "two", Task: "deploy-1", Args: pathArgs("workspace/src/a.py")})
	id := s.next(t, "pending").ApprovalID
	ev := nextEvent(t, oev, odone, "approval_parked")
	if a := ev.Approval; ev.Event != api.DaemonEventApprovalParked || a == nil || a.ApprovalID != id || a.Tool != "two" ||
		a.Principal != "agent" || a.Task != "deploy-1" || a.ExpiresAt == "" || a.Approvers != 2 {
		t.Fatalf("parked event: %+v %+v", ev, ev.Approval)
	}
	if _, err := h.c.Decide(ctx, id, false, "no"); err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, oev, odone, "approval_decided")
	if a := ev.Approval; ev.Event != api.DaemonEventApprovalDecided || a == nil || a.ApprovalID != id ||
		a.Verdict != api.VerdictDeny || a.Reason != api.ReasonApprovalDenied || a.By != "ops" {
		t.Fatalf("decided event: %+v %+v", ev, ev.Approval)
	}
	s.wait(t)
	// The agent's stream had neither: its next event is the reload's.
	writeManifest(t, base, strings.Replace(string(must(os.ReadFile(m))), `"pool":0`, `"pool":0,"description":"echo"`, 1))
	if _, err := h.c.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, aev, adone, "the agent's next event"); ev.Event != api.DaemonEventPolicyLoaded {
		t.Fatalf("the agent's stream carried %+v %+v", ev, ev.Approval)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
