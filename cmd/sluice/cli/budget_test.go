package cli

import (
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// fakeBudgets answers POST /v1/budgets/{principal}/reset: prober is reset
// (it was locked out), ops has no budget (404), and a caller named
// "notops" is not an approver (403).
func fakeBudgets(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/budgets/prober/reset":
			json.NewEncoder(w).Encode(api.BudgetReset{Principal: "prober", Cleared: 2, ExhaustedUntil: "2026-12-05T12:00:00.000Z"})
		case r.Method == "POST" && r.URL.Path == "/v1/budgets/ops/reset":
			w.WriteHeader(404)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: api.ErrNotFound, Message: "no budget"}})
		default:
			w.WriteHeader(403)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: api.ErrForbidden, Message: "only an approver principal may reset a budget"}})
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestBudgetReset: sluice budget reset says what it cleared; a principal
// without a budget exits 1, a caller who is not an approver 3; bad usage
// 2; --help 0.
func TestBudgetReset(t *testing.T) {
	sock := fakeBudgets(t)
	code, out, errOut := runCLI(t, "--socket", sock, "budget", "reset", "prober")
	if code != ExitOK || out != "reset the budgets of prober: 2 denials in the window cleared; its lockout (until 2026-12-05T12:00:00.000Z) ended\n" {
		t.Fatalf("exit %d: %q %q", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "--socket", sock, "budget", "reset", "ops"); code != ExitFailed || !strings.Contains(errOut, "principal ops has no rate or denial_budget") {
		t.Fatalf("no budget: exit %d %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, "--socket", sock, "budget", "reset", "someone"); code != ExitDenied || !strings.Contains(errOut, "only an approver") {
		t.Fatalf("not an approver: exit %d %q", code, errOut)
	}
	for _, args := range [][]string{{"budget"}, {"budget", "reset"}, {"budget", "reset", "a", "b"}, {"budget", "clear", "a"}} {
		if code, _, _ := runCLI(t, append([]string{"--socket", sock}, args...)...); code != ExitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, ExitUsage)
		}
	}
	for _, args := range [][]string{{"budget", "--help"}, {"budget", "reset", "--help"}} {
		if code, out, _ := runCLI(t, args...); code != ExitOK || !strings.HasPrefix(out, "Usage: sluice budget reset PRINCIPAL") {
			t.Errorf("%q: exit %d %q", args, code, out)
		}
	}
	if _, out, _ := runCLI(t, "--help"); !strings.Contains(out, "budget reset PRINCIPAL") {
		t.Error("sluice --help does not list budget reset")
	}
}

// TestStatusBudgets: sluice status shows each principal's budgets, a
// lockout with when it ends and how to reset it.
func TestStatusBudgets(t *testing.T) {
	st := api.Status{Version: "0.1.0", PolicyVersion: "sha256:pv", Scope: "all", Principal: "ops", Audit: "ok",
		Denials: api.StatusDenials{WindowS: 300, ByReason: map[string]int{}},
		Budgets: []api.StatusBudget{
			{Principal: "prober", BudgetExhausted: 7, DenialBudget: &api.StatusDenialBudget{Denials: 3, WindowS: 3600, ExhaustedUntil: "2026-12-05T13:00:00.000Z"}},
			{Principal: "rated", RateLimited: 4, Rate: &api.StatusRate{PerSecond: 0.5, Burst: 3, Available: 1.25},
				DenialBudget: &api.StatusDenialBudget{Denials: 20, WindowS: 300, Spent: 2}},
		}}
	sock := fakeOps(t, st, api.Tasks{})
	code, out, errOut := runCLI(t, "--socket", sock, "status")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"budgets:\n",
		"  prober: EXHAUSTED until 2026-12-05T13:00:00.000Z (7 refused; sluice budget reset prober)\n",
		"  rated: rate 0.5/s burst 3 (1.2 available, 4 refused); denials 2 of 20 in 300s\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}
