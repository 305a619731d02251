//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

const ratedUID = 4444

// budgetFixture: prober (agentUID) may be denied 3 times an hour;
// bystander (intruderUID) has a budget of its own; rated (ratedUID) may
// make 3 calls back to back, then one per 1000 s (so no refill happens
// during the test: the refill is the limiter's unit test, on a fake
// clock); ops (uid 0) is the approver.
func budgetFixture(t *testing.T) (*harness, string) {
	t.Helper()
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	m := writeManifest(t, fx.Base, `{"schema_version":1,
	  "principals":{"prober":{"uids":[4242],"tools":["*"],"denial_budget":{"denials":3,"window_s":3600}},
	                "bystander":{"uids":[4343],"tools":["*"],"denial_budget":{"denials":3,"window_s":3600}},
	                "rated":{"uids":[4444],"tools":["*"],"rate":{"per_second":0.001,"burst":3}},
	                "ops":{"uids":[0],"approver":true,"tools":[]}},
	  "tools":{"read_src":{"operation":"read","roots":["workspace/src"],"never":[".env"]}}}`)
	addr := make(chan string, 1)
	h := start(t, m, securefs.ModeAuto, func(c *Config) {
		c.MetricsListen, c.MetricsListening = "127.0.0.1:0", func(a string) { addr <- a }
	})
	return h, "http://" + <-addr + "/metrics"
}

func readSrc(path string) api.CallRequest {
	a, _ := json.Marshal(map[string]string{"path": path})
	return api.CallRequest{Tool: "read_src", Args: a}
}

func mustCall(t *testing.T, c *client.Client, req api.CallRequest) *api.CallResult {
	t.Helper()
	res, err := c.Call(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestDenialBudgetOverSocket: a prober denied 3 times is cut off: its
// next calls, allowed ones too, buffered and streamed, are
// budget_exhausted with when that ends, recorded; a bystander calling
// meanwhile is unaffected; status and metrics show it; only an approver
// may reset it, and the reset restores it; a reload keeps the counts.
func TestDenialBudgetOverSocket(t *testing.T) {
	h, metricsURL := budgetFixture(t)
	prober, bystander, ops := clientAs(h.socket, agentUID), clientAs(h.socket, intruderUID), clientAs(h.socket, 0)
	for _, c := range []*client.Client{prober, bystander, ops} {
		defer c.Close()
	}
	ctx := context.Background()

	probes := []struct {
		req  api.CallRequest
		want api.Reason
	}{
		{readSrc("workspace/secret.txt"), api.ReasonOutsideRoots},
		{readSrc("workspace/src/.env"), api.ReasonNeverListed},
		{api.CallRequest{Tool: "read_env", Args: []byte(`{}`)}, api.ReasonUnknownTool},
	}
	for i, p := range probes {
		// The bystander, calling between the probes, is never slowed.
		if res := mustCall(t, bystander, readSrc("workspace/src/a.py")); res.Reason != api.ReasonAllowed {
			t.Fatalf("bystander before probe %d: %+v", i, res)
		}
		res := mustCall(t, prober, p.req)
		if res.Reason != p.want {
			t.Fatalf("probe %d: %+v, want %s", i, res, p.want)
		}
		if spent := strings.Contains(res.Detail, "this denial spent principal prober's denial budget (3 denials within 3600 s)"); spent != (i == 2) {
			t.Errorf("probe %d detail: %q", i, res.Detail)
		}
	}
	// Cut off: an allowed call is refused too, and says until when.
	for range 5 {
		res := mustCall(t, prober, readSrc("workspace/src/a.py"))
		if res.Verdict != api.VerdictDeny || res.Reason != api.ReasonBudgetExhausted || res.Output != nil ||
			!strings.Contains(res.Detail, "every call is refused until ") || !strings.Contains(res.Detail, "sluice budget reset prober") {
			t.Fatalf("the cut-off prober's allowed call: %+v", res)
		}
	}
	var decision api.Event
	res, err := prober.Stream(ctx, readSrc("workspace/src/a.py"), func(ev api.Event) error {
		if ev.Event == api.EventDecision {
			decision = ev
		}
		return nil
	})
	if err != nil || res.Reason != api.ReasonBudgetExhausted || decision.Reason != api.ReasonBudgetExhausted {
		t.Fatalf("the cut-off prober's streamed call: %+v %v (decision %s)", res, err, decision.Raw)
	}
	// The bystander's own denial counts against its own budget only.
	if res := mustCall(t, bystander, readSrc("workspace/secret.txt")); res.Reason != api.ReasonOutsideRoots {
		t.Fatalf("bystander's denial: %+v", res)
	}
	if res := mustCall(t, bystander, readSrc("workspace/src/a.py")); res.Reason != api.ReasonAllowed {
		t.Fatalf("bystander after the prober was cut off: %+v", res)
	}

	// Status: the prober sees its own spent budget; the bystander only
	// its own; the approver everyone's.
	waitFor(t, "the refusals counted", func() bool {
		s, err := ops.Status(ctx)
		return err == nil && s.Denials.ByReason[string(api.ReasonBudgetExhausted)] == 6
	})
	s, err := prober.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Budgets) != 1 || s.Budgets[0].Principal != "prober" || s.Budgets[0].BudgetExhausted != 6 ||
		s.Budgets[0].DenialBudget == nil || s.Budgets[0].DenialBudget.ExhaustedUntil == "" || s.Budgets[0].DenialBudget.TimesSpent != 1 ||
		s.Budgets[0].DenialBudget.Denials != 3 || s.Budgets[0].DenialBudget.WindowS != 3600 || s.Budgets[0].Rate != nil {
		t.Fatalf("the prober's budgets: %+v", s.Budgets)
	}
	if s, err := bystander.Status(ctx); err != nil || len(s.Budgets) != 1 || s.Budgets[0].Principal != "bystander" ||
		s.Budgets[0].DenialBudget.Spent != 1 || s.Budgets[0].DenialBudget.ExhaustedUntil != "" {
		t.Fatalf("the bystander's budgets: %+v %v", s, err)
	}
	if s, err := ops.Status(ctx); err != nil || len(s.Budgets) != 3 || s.Budgets[0].Principal != "bystander" ||
		s.Budgets[1].Principal != "prober" || s.Budgets[2].Principal != "rated" {
		t.Fatalf("the approver's budgets: %+v %v", s, err)
	}
	body := scrape(t, metricsURL)
	for _, want := range []string{
		`sluice_budget_exhausted_total{principal="prober"} 6`, `sluice_budget_spent{principal="prober"} 1`,
		`sluice_budget_denials{principal="bystander"} 1`, `sluice_budget_spent{principal="bystander"} 0`,
		`sluice_rate_limited_total{principal="rated"} 0`,
		`sluice_principal_denials_total{principal="prober",reason="budget_exhausted"} 6`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}

	// Only an approver resets; a principal without a budget is 404.
	if _, err := prober.ResetBudget(ctx, "prober"); !isStatus(err, 403) {
		t.Fatalf("the prober resetting itself: %v, want 403", err)
	}
	if _, err := bystander.ResetBudget(ctx, "prober"); !isStatus(err, 403) {
		t.Fatalf("the bystander resetting the prober: %v, want 403", err)
	}
	if _, err := ops.ResetBudget(ctx, "ops"); !isStatus(err, 404) {
		t.Fatalf("reset of a principal without budgets: %v, want 404", err)
	}
	if res := mustCall(t, prober, readSrc("workspace/src/a.py")); res.Reason != api.ReasonBudgetExhausted {
		t.Fatalf("after refused resets: %+v", res)
	}
	r, err := ops.ResetBudget(ctx, "prober")
	if err != nil || r.Principal != "prober" || r.ExhaustedUntil == "" {
		t.Fatalf("the approver's reset: %+v %v", r, err)
	}
	if res := mustCall(t, prober, readSrc("workspace/src/a.py")); res.Reason != api.ReasonAllowed || !res.OK {
		t.Fatalf("the prober after the reset: %+v", res)
	}

	// A reload keeps the counts: two denials before it, one after,
	// spend the budget.
	for _, path := range []string{"workspace/secret.txt", "workspace/src/.env"} {
		if res := mustCall(t, prober, readSrc(path)); res.Verdict != api.VerdictDeny {
			t.Fatalf("%s: %+v", path, res)
		}
	}
	if _, err := ops.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := prober.Status(ctx); err != nil || s.Budgets[0].DenialBudget.Spent != 2 {
		t.Fatalf("after the reload: %+v %v", s, err)
	}
	if res := mustCall(t, prober, readSrc("workspace/secret.txt")); !strings.Contains(res.Detail, "this denial spent") {
		t.Fatalf("the third denial after a reload: %+v", res)
	}
	if res := mustCall(t, prober, readSrc("workspace/src/a.py")); res.Reason != api.ReasonBudgetExhausted {
		t.Fatalf("after the reload's third denial: %+v", res)
	}

	// The ledger: the refusals are decisions, with when they end; the
	// reset is its own record, naming the approver and whose budget.
	var refused, resets int
	for _, line := range bytes.Split(h.ledger(), []byte("\n")) {
		var rec struct {
			Kind, Verdict, Reason, Rule, Detail string
			Principal                           struct{ Name string }
		}
		if json.Unmarshal(line, &rec) != nil {
			continue
		}
		switch {
		case rec.Kind == "decision" && rec.Reason == string(api.ReasonBudgetExhausted):
			refused++
			if rec.Verdict != "deny" || rec.Principal.Name != "prober" || rec.Rule != "principals.prober.denial_budget" ||
				!strings.Contains(rec.Detail, "every call is refused until ") {
				t.Errorf("a refusal's record: %s", line)
			}
		case rec.Kind == "budget_reset":
			resets++
			if rec.Principal.Name != "ops" || rec.Detail != "budgets of principal prober reset" {
				t.Errorf("the reset's record: %s", line)
			}
		}
	}
	if refused != 8 || resets != 1 {
		t.Errorf("ledger: %d refusals, %d resets; want 8 and 1", refused, resets)
	}
}

// TestRateLimitOverSocket: burst calls back to back, then the next is
// rate_limited, recorded, with when to retry; another principal is not
// slowed. (The refill is TestRateBucket's, on a fake clock.)
func TestRateLimitOverSocket(t *testing.T) {
	h, metricsURL := budgetFixture(t)
	rated, bystander := clientAs(h.socket, ratedUID), clientAs(h.socket, intruderUID)
	defer rated.Close()
	defer bystander.Close()
	for i := range 3 {
		if res := mustCall(t, rated, readSrc("workspace/src/a.py")); res.Reason != api.ReasonAllowed {
			t.Fatalf("call %d of the burst: %+v", i, res)
		}
	}
	res := mustCall(t, rated, readSrc("workspace/src/a.py"))
	if res.Verdict != api.VerdictDeny || res.Reason != api.ReasonRateLimited || res.Output != nil ||
		!strings.Contains(res.Detail, "principal rated is over 0.001/s, burst 3; retry at ") {
		t.Fatalf("the burst+1st call: %+v", res)
	}
	for range 3 {
		if res := mustCall(t, bystander, readSrc("workspace/src/a.py")); res.Reason != api.ReasonAllowed {
			t.Fatalf("bystander: %+v", res)
		}
	}
	if !strings.Contains(scrape(t, metricsURL), `sluice_rate_limited_total{principal="rated"} 1`+"\n") {
		t.Error("metrics lack the refusal")
	}
	if !bytes.Contains(h.ledger(), []byte(`"reason":"rate_limited","rule":"principals.rated.rate"`)) {
		t.Error("the ledger lacks the refusal's decision")
	}
}
