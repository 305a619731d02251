package mcp_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// TestMCPBudgetExhausted: through the bridge, a principal whose denial
// budget is spent gets a tool error with the reason budget_exhausted and
// when it ends, for an allowed call too.
func TestMCPBudgetExhausted(t *testing.T) {
	_, m := fixture(t, "")
	raw, _ := os.ReadFile(m)
	budgeted := bytes.Replace(raw, []byte(`"agent":{"uids":[4242],"tools":["*"]}`),
		[]byte(`"agent":{"uids":[4242],"tools":["*"],"denial_budget":{"denials":2,"window_s":3600}}`), 1)
	if bytes.Equal(budgeted, raw) {
		t.Fatal("the fixture's agent principal changed: update this test")
	}
	os.WriteFile(m, budgeted, 0o644)
	d := startSluiced(t, m)
	s := connect(t, d.socket, clientAs(d.socket, agentUID), "")
	for _, c := range []struct {
		path string
		want api.Reason
	}{
		{"workspace/src/.env", api.ReasonNeverListed},
		{"workspace/secret.txt", api.ReasonOutsideRoots},
		{"workspace/src/a.py", api.ReasonBudgetExhausted},
	} {
		res := s.mustCall(t, "read_file", map[string]any{"path": c.path})
		st := structured(t, res)
		if !res.IsError || st.Reason != c.want || !strings.HasPrefix(texts(res), "sluice denied this call: "+string(c.want)) {
			t.Fatalf("%s: %+v %q", c.path, st, texts(res))
		}
		if c.want == api.ReasonBudgetExhausted && !strings.Contains(texts(res), "every call is refused until ") {
			t.Errorf("the refusal does not say when it ends: %q", texts(res))
		}
	}
}
