package cli

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// fakeApprovals answers GET /v1/approvals (a-1 waits for two approvers,
// dave approved), POST /v1/approvals/{id} (a-1: the second approval, with
// the grant it was asked for; a-2: an approval that still waits) and GET
// /v1/events (subscribed, a-1 parked, a-1 decided, then the end). The
// decision bodies it received are kept in got.
func fakeApprovals(t *testing.T) (sock string, got func() []string) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var bodies []string
	listed := api.Approval{ApprovalID: "a-1", CallID: "c-1", Principal: "agent", Tool: "deploy\x1b[2J", Args: json.RawMessage(`{"path":"x"}`),
		Task: "t1", ExpiresAt: "2026-12-05T12:00:00Z", Approvers: 2, ApprovedBy: []string{"dave"},
		Change: &api.ApprovalChange{Kind: api.OpRead, Summary: []api.ChangeField{{Label: "path", Value: "x"}}}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "GET" && r.URL.Path == "/v1/approvals":
			json.NewEncoder(w).Encode(api.Approvals{Approvals: []api.Approval{listed}})
		case r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/v1/approvals/"):
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies = append(bodies, string(b))
			mu.Unlock()
			var d api.ApprovalDecision
			json.Unmarshal(b, &d)
			o := api.ApprovalOutcome{ApprovalID: strings.TrimPrefix(r.URL.Path, "/v1/approvals/"), CallID: "c-1", Approvers: 2}
			if o.ApprovalID == "a-2" {
				o.Waiting, o.ApprovedBy = true, []string{"ops"}
			} else {
				o.Approved, o.ApprovedBy = true, []string{"dave", "ops"}
				if d.Grant != nil {
					o.Grant = &api.Grant{ID: "g-1", Principal: "agent", Tool: "deploy", Task: "t1", ExpiresAt: "2026-12-05T12:30:00Z"}
				}
			}
			json.NewEncoder(w).Encode(o)
		case r.Method == "GET" && r.URL.Path == "/v1/events":
			w.Header().Set("Content-Type", "application/x-ndjson")
			enc := json.NewEncoder(w)
			enc.Encode(api.DaemonEvent{Event: api.DaemonEventSubscribed, PolicyVersion: "sha256:pv"})
			enc.Encode(api.DaemonEvent{Event: api.DaemonEventApprovalParked, Approval: &api.ApprovalEvent{ApprovalID: "a-1", Tool: "deploy"}})
			enc.Encode(api.DaemonEvent{Event: api.DaemonEventApprovalDecided, Approval: &api.ApprovalEvent{ApprovalID: "a-1", Principal: "agent",
				Tool: "deploy", Verdict: api.VerdictAllow, Reason: api.ReasonAllowed, ApprovedBy: []string{"dave", "ops"}, Grant: "g-1"}})
			enc.Encode(api.DaemonEvent{Event: api.DaemonEventApprovalDecided, Approval: &api.ApprovalEvent{ApprovalID: "a-3", Principal: "agent",
				Tool: "deploy", Verdict: api.VerdictDeny, Reason: api.ReasonApprovalDenied, By: "bob"}})
		default:
			w.WriteHeader(404)
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), bodies...) }
}

// TestApprovalsScaleCLI: the listing says how many of N approved and
// who; approve --grant sends the grant and prints it; an approval that
// still waits says so; --watch prints what waits when it subscribes and
// each decided wait as its event comes; agent strings stay escaped.
func TestApprovalsScaleCLI(t *testing.T) {
	sock, got := fakeApprovals(t)
	code, out, errOut := runCLI(t, "--socket", sock, "approvals")
	if code != ExitOK || !strings.Contains(out, "approvals: 1 of 2 (dave)") || strings.Contains(out, "\x1b") || !strings.Contains(out, `deploy\x1b[2J`) {
		t.Fatalf("approvals: %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "--socket", sock, "approvals", "approve", "a-1", "--note", "ok", "--grant", "30m")
	if code != ExitOK || !strings.Contains(out, "approved a-1 (call c-1) by dave, ops") ||
		!strings.Contains(out, "granted g-1: calls of deploy by agent in task t1 run without approval until 2026-12-05T12:30:00Z") {
		t.Fatalf("approve --grant: %d\n%s\n%s", code, out, errOut)
	}
	if b := got(); len(b) != 1 || b[0] != `{"approve":true,"note":"ok","grant":{"minutes":30}}` {
		t.Fatalf("sent %q", b)
	}
	code, out, _ = runCLI(t, "--socket", sock, "approve", "a-2")
	if code != ExitOK || !strings.Contains(out, "approved a-2 (call c-1): 1 of 2 approvals (ops); it waits for 1 more approver principal(s)") {
		t.Fatalf("a waiting approval: %d\n%s", code, out)
	}
	for _, bad := range [][]string{{"deny", "a-1", "--grant", "30m"}, {"approve", "a-1", "--grant", "90s"}} {
		if code, _, _ := runCLI(t, append([]string{"--socket", sock}, bad...)...); code != ExitUsage {
			t.Errorf("%v: exit %d, want usage", bad, code)
		}
	}
	if len(got()) != 2 {
		t.Fatalf("a refused flag reached sluiced: %q", got())
	}
	code, out, errOut = runCLI(t, "--socket", sock, "approvals", "--watch")
	if strings.Count(out, "APPROVAL") != 1 || strings.Count(out, "a-1 (agent, deploy") != 2 ||
		!strings.Contains(out, "a-1 (agent, deploy): approved by dave, ops, with grant g-1") ||
		!strings.Contains(out, "a-3 (agent, deploy): denied by bob") || !strings.Contains(errOut, "ended the event stream") || code != ExitFailed {
		t.Fatalf("approvals --watch: %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = runCLI(t, "--socket", sock, "approvals", "--watch", "--json")
	// JSON: what waits when it subscribes, then every approval event.
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || !strings.Contains(lines[0], `"approval_id":"a-1"`) ||
		!strings.Contains(lines[1], `"event":"approval_parked"`) || !strings.Contains(lines[2], `"event":"approval_decided"`) {
		t.Fatalf("approvals --watch --json: %d\n%s", code, out)
	}
}

// TestApprovalWho: a parked call made with a delegation token shows it
// beside its principal.
func TestApprovalWho(t *testing.T) {
	if got := approvalWho(api.Approval{Principal: "agent"}); got != "agent" {
		t.Errorf("%q", got)
	}
	if got := approvalWho(api.Approval{Principal: "agent", Token: &api.ApprovalToken{ID: "t-1", Subject: "reviewer"}}); got != "agent via token t-1 (reviewer)" {
		t.Errorf("%q", got)
	}
}
