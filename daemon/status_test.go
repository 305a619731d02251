//go:build linux

package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestStatus: GET /v1/status and GET /v1/tasks show an approver every
// principal's calls in flight, parked approvals, recent denials, tasks and
// the pools; any other principal only its own (no pools); a peer that maps
// to no principal gets 403.
func TestStatus(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	m := writeManifest(t, fx.Base, `{"schema_version":1,
	  "principals":{"agent":{"uids":[4242],"tools":["*"]},"intruder":{"uids":[4343],"tools":["*"]},
	                "ops":{"uids":[0],"approver":true,"tools":[]}},
	  "tools":{"ask_read":{"operation":"read","roots":["workspace/src"],"approval":"human"},
	           "read_src":{"operation":"read","roots":["workspace/src"]},
	           "warm":{"operation":"execute","commands":[["true"]],"pool":1}}}`)
	runDir := checkedRunDir(t)
	addr := make(chan string, 1)
	h := start(t, m, securefs.ModeAuto, func(c *Config) {
		c.RunDir = runDir
		c.MetricsListen, c.MetricsListening = "127.0.0.1:0", func(a string) { addr <- a }
	})
	metricsURL := "http://" + <-addr + "/metrics"
	agent, intruder, ops, stranger := clientAs(h.socket, agentUID), clientAs(h.socket, intruderUID), clientAs(h.socket, 0), clientAs(h.socket, 5555)
	for _, c := range []interface{ Close() }{agent, intruder, ops, stranger} {
		defer c.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The agent's call waits for an approver; the intruder is denied.
	asked := startStream(agent, ctx, api.CallRequest{Tool: "ask_read", Args: []byte(`{"path":"workspace/src/a.py"}`), Task: "t-agent"})
	ev := asked.next(t, "the parked call's decision")
	if ev.Verdict != api.VerdictPending {
		t.Fatalf("ask_read: %s", ev.Raw)
	}
	res, err := intruder.Call(ctx, api.CallRequest{Tool: "read_src", Args: []byte(`{"path":"workspace/secret.txt"}`), Task: "t-intruder"})
	if err != nil || res.Reason != api.ReasonOutsideRoots {
		t.Fatalf("intruder: %+v %v", res, err)
	}
	// A denial is counted just after its result is sent.
	waitFor(t, "the intruder's denial counted", func() bool {
		s, err := ops.Status(ctx)
		return err == nil && s.Denials.Total == 1
	})

	s, err := agent.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Scope != "own" || s.Principal != "agent" || len(s.Calls) != 1 || s.Approvals.Count != 1 || s.Denials.Total != 0 || len(s.Pools) != 0 {
		t.Fatalf("the agent's status: %+v", s)
	}
	if c := s.Calls[0]; c.CallID != ev.CallID || c.Tool != "ask_read" || c.Principal != "agent" || c.Task != "t-agent" || c.ApprovalID != ev.ApprovalID {
		t.Fatalf("the agent's call: %+v (decision %s)", c, ev.Raw)
	}
	if s.Version != api.Version || s.PolicyVersion == "" || s.Approvals.Oldest == "" || s.Denials.WindowS != 300 {
		t.Fatalf("the agent's status: %+v", s)
	}

	s, err = intruder.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Scope != "own" || len(s.Calls) != 0 || s.Approvals.Count != 0 || s.Denials.Total != 1 ||
		s.Denials.ByReason[string(api.ReasonOutsideRoots)] != 1 || len(s.Pools) != 0 {
		t.Fatalf("the intruder's status: %+v", s)
	}

	s, err = ops.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Scope != "all" || len(s.Calls) != 1 || s.Approvals.Count != 1 || s.Denials.ByReason[string(api.ReasonOutsideRoots)] != 1 ||
		len(s.Pools) != 1 || s.Pools[0].Tool != "warm" || s.Pools[0].Size != 1 {
		t.Fatalf("the approver's status: %+v", s)
	}

	// The metrics count the parked call, and each principal's calls.
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"sluice_approvals_parked 1\n", `sluice_principal_denials_total{principal="intruder",reason="outside_roots"} 1` + "\n",
		`sluice_principal_calls_total{principal="intruder",verdict="deny"} 1` + "\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	if _, err := stranger.Status(ctx); !isStatus(err, 403) {
		t.Fatalf("an unmapped peer's status: %v, want 403", err)
	}
	if _, err := stranger.Tasks(ctx); !isStatus(err, 403) {
		t.Fatalf("an unmapped peer's tasks: %v, want 403", err)
	}

	tasks := func(c interface {
		Tasks(context.Context) (*api.Tasks, error)
	}) string {
		t.Helper()
		ts, err := c.Tasks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := ""
		for _, ti := range ts.Tasks {
			out += fmt.Sprintf("%s/%s gen %d in flight %d cancelled %v; ", ti.Principal, ti.Task, ti.Generation, ti.InFlight, ti.Cancelled != "")
		}
		return out
	}
	if got, want := tasks(agent), "agent/t-agent gen 0 in flight 1 cancelled false; "; got != want {
		t.Fatalf("the agent's tasks: %q, want %q", got, want)
	}
	if got, want := tasks(intruder), "intruder/t-intruder gen 0 in flight 0 cancelled false; "; got != want {
		t.Fatalf("the intruder's tasks: %q, want %q", got, want)
	}
	if got := tasks(ops); got != "agent/t-agent gen 0 in flight 1 cancelled false; intruder/t-intruder gen 0 in flight 0 cancelled false; " &&
		got != "intruder/t-intruder gen 0 in flight 0 cancelled false; agent/t-agent gen 0 in flight 1 cancelled false; " {
		t.Fatalf("the approver's tasks: %q", got)
	}

	// An approved call is decoded again while status is read (go test
	// -race: status reads only what the call's begin set).
	second := startStream(agent, ctx, api.CallRequest{Tool: "ask_read", Args: []byte(`{"path":"workspace/src/a.py"}`)})
	ev2 := second.next(t, "the second parked call's decision")
	if ev2.Verdict != api.VerdictPending {
		t.Fatalf("second ask_read: %s", ev2.Raw)
	}
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-second.done:
				return
			default:
			}
			if _, err := ops.Status(ctx); err != nil {
				return
			}
		}
	}()
	if _, err := ops.Decide(ctx, ev2.ApprovalID, true, ""); err != nil {
		t.Fatal(err)
	}
	if r := second.wait(t); !r.OK {
		t.Fatalf("the approved call: %+v", r)
	}
	<-polled

	// Cancelled, the agent's task shows its new generation, and its call
	// leaves the status.
	if _, err := agent.CancelTask(ctx, "t-agent"); err != nil {
		t.Fatal(err)
	}
	if r := asked.wait(t); r.Reason != api.ReasonTaskCancelled {
		t.Fatalf("the parked call after its task's cancel: %+v", r)
	}
	waitFor(t, "the cancelled call to leave the status", func() bool {
		s, err := agent.Status(ctx)
		return err == nil && len(s.Calls) == 0 && s.Approvals.Count == 0
	})
	if got, want := tasks(agent), "agent/t-agent gen 1 in flight 0 cancelled true; "; got != want {
		t.Fatalf("the agent's tasks after the cancel: %q, want %q", got, want)
	}
}

// TestDenialWindow: a denial counts in GET /v1/status for 290 to 300
// seconds (10 s steps), then not.
func TestDenialWindow(t *testing.T) {
	var l denialLog
	t0 := time.Unix(1_000_000, 0) // on a step
	l.add(t0, "a", api.ReasonOutsideRoots)
	l.add(t0.Add(5*time.Second), "b", api.ReasonNeverListed)
	for _, c := range []struct {
		at        time.Duration
		principal string
		all       bool
		want      int
	}{
		{0, "a", false, 1},
		{0, "a", true, 2},
		{0, "c", false, 0},
		{299 * time.Second, "", true, 2},
		{300 * time.Second, "", true, 0},
		{-time.Second, "", true, 0}, // a clock that went back: the future is not counted
	} {
		if got := l.counts(t0.Add(c.at), c.principal, c.all); got.Total != c.want {
			t.Errorf("at +%s, %q (all %v): %+v, want %d", c.at, c.principal, c.all, got, c.want)
		}
	}
	// A bucket reused a window later starts afresh.
	l.add(t0.Add(300*time.Second), "a", api.ReasonOutsideRoots)
	if got := l.counts(t0.Add(300*time.Second), "a", false); got.Total != 1 {
		t.Errorf("after reuse: %+v", got)
	}
}
