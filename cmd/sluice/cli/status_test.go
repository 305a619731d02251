package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/termsafe"
)

// fakeOps answers GET /v1/status, GET /v1/tasks and POST
// /v1/calls/{id}/cancel (c-1 is in flight; any other id is a 404).
func fakeOps(t *testing.T, st api.Status, ts api.Tasks) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "GET" && r.URL.Path == "/v1/status":
			json.NewEncoder(w).Encode(st)
		case r.Method == "GET" && r.URL.Path == "/v1/tasks":
			json.NewEncoder(w).Encode(ts)
		case r.Method == "POST" && r.URL.Path == "/v1/calls/c-1/cancel":
			json.NewEncoder(w).Encode(api.CallCancel{CallID: "c-1"})
		default:
			w.WriteHeader(404)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: api.ErrNotFound, Message: "no call of yours is in flight"}})
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestStatus: sluice status shows the daemon's status readably, with what
// came from the agents (tool names, task ids) escaped; --json as sent.
func TestStatus(t *testing.T) {
	st := api.Status{Version: "0.1.0", Revision: "abc", PolicyVersion: "sha256:pv", Scope: "all", Principal: "ops", Audit: "ok",
		Calls: []api.StatusCall{
			{CallID: "c-1", Principal: "agent", Tool: "ask_read", Task: "t\x1b[2J", AgeS: 75.2, ApprovalID: "a-1"},
			{CallID: "c-2", Principal: "agent", Tool: "run_tests", AgeS: 0.25},
		},
		Approvals:   api.StatusParked{Count: 1, Oldest: "2026-12-05T12:00:00Z", OldestAgeS: 75.2},
		Pools:       []api.StatusPool{{Tool: "run_tests", Ready: 1, Size: 2}},
		MCPSessions: 3,
		Denials:     api.StatusDenials{WindowS: 300, Total: 3, ByReason: map[string]int{"outside_roots": 2, "never_listed": 1}},
		Tasks:       2}
	sock := fakeOps(t, st, api.Tasks{})
	code, out, errOut := runCLI(t, "--socket", sock, "status")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"sluiced 0.1.0 (rev abc), policy_version sha256:pv, audit ok\n",
		"showing every principal (you are ops, an approver)\n",
		"calls in flight: 2\n",
		`c-1   agent      ask_read   t\x1b[2J  1m15s  approval a-1`,
		"c-2   agent      run_tests  -",
		"250ms",
		"waiting for approval: 1 (the oldest began 1m15s ago)\n",
		"pools: run_tests 1/2 ready\n",
		"attached MCP sessions: 3\n",
		"denials in the last 5m: 3 (outside_roots 2, never_listed 1)\n",
		"tasks remembered: 2 (sluice tasks list)\n",
		"! 1 control/invisible characters in tool names or task ids, shown escaped\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if _, n := termsafe.Escape(out, true); n != 0 {
		t.Errorf("raw control characters reached the terminal: %q", out)
	}

	code, out, _ = runCLI(t, "--socket", sock, "status", "--json")
	var back api.Status
	if code != ExitOK || json.Unmarshal([]byte(out), &back) != nil || back.Calls[0].Task != "t\x1b[2J" || back.Denials.Total != 3 {
		t.Fatalf("status --json: exit %d: %s", code, out)
	}

	// A principal's own view names no pools.
	own := api.Status{Version: "0.1.0", PolicyVersion: "sha256:pv", Scope: "own", Principal: "agent", Audit: "ok", Denials: api.StatusDenials{WindowS: 300}}
	_, out, _ = runCLI(t, "--socket", fakeOps(t, own, api.Tasks{}), "status")
	if !strings.Contains(out, "showing agent's own calls") || strings.Contains(out, "pools") || !strings.Contains(out, "denials in the last 5m: 0\n") {
		t.Errorf("own status:\n%s", out)
	}
}

// TestCancelAndTasks: sluice cancel ends a call (exit 0) or says none of
// yours is in flight (exit 1); sluice tasks list lists the tasks.
func TestCancelAndTasks(t *testing.T) {
	sock := fakeOps(t, api.Status{}, api.Tasks{Tasks: []api.TaskInfo{
		{Task: "t-1", Principal: "agent", Generation: 2, InFlight: 1, LastUsed: "2026-12-05T12:00:00Z", Cancelled: "2026-12-05T12:01:00Z"},
	}})
	if code, out, errOut := runCLI(t, "--socket", sock, "cancel", "c-1"); code != ExitOK || out != "cancelled call c-1: its result says cancelled\n" {
		t.Errorf("cancel c-1: exit %d, %q %q", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "--socket", sock, "cancel", "c-9"); code != ExitFailed || !strings.Contains(errOut, "no call c-9 of yours is in flight") {
		t.Errorf("cancel c-9: exit %d, %q", code, errOut)
	}
	if code, _, _ := runCLI(t, "--socket", sock, "cancel"); code != ExitUsage {
		t.Errorf("cancel without an id: exit %d", code)
	}
	code, out, errOut := runCLI(t, "--socket", sock, "tasks", "list")
	if code != ExitOK || !strings.Contains(out, "TASK  PRINCIPAL  GENERATION  IN FLIGHT  LAST USED") ||
		!strings.Contains(out, "t-1   agent      2           1          2026-12-05T12:00:00Z  2026-12-05T12:01:00Z") {
		t.Errorf("tasks list: exit %d:\n%s%s", code, out, errOut)
	}
}

// TestVersion: sluice --version prints the version, exit 0.
func TestVersion(t *testing.T) {
	code, out, _ := runCLI(t, "--version")
	if code != ExitOK || out != "sluice "+api.BuildVersion()+"\n" || !strings.HasPrefix(out, "sluice "+api.Version) {
		t.Fatalf("--version: exit %d, %q", code, out)
	}
}
