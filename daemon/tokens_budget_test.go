//go:build linux

package daemon

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestTokenBudgetNotMultiplied: an agent whose denial budget is spent
// cannot buy a fresh one by minting tokens (nor by revoking them and
// minting again): the tokens of one minter share one more budget, its
// limits, beside each token's own. A sub-agent's probing still locks out
// the tokens, not the minter's own calls.
func TestTokenBudgetNotMultiplied(t *testing.T) {
	testutil.RequireRoot(t)
	base, _ := tokenFixture(t)
	m := writeManifest(t, base, fmt.Sprintf(`{"schema_version":1,
	  "principals":{"orch":{"uids":[%d],"tools":["*"],"denial_budget":{"denials":3,"window_s":600}},
	                "ops":{"uids":[4243],"tools":[],"approver":true}},
	  "tools":{"read_file":{"operation":"read","roots":["workspace/src"]}}}`, os.Getuid()))
	h := start(t, m, securefs.ModeAuto)
	n := 0
	spend := func(tok string) (allowedProbes int) {
		t.Helper()
		c := h.c
		if tok != "" {
			c = h.as(tok, -1)
		}
		for range 5 {
			n++
			res := callWith(t, c, "read_file", map[string]string{"path": fmt.Sprintf("workspace/src/missing%d", n)}, "")
			switch res.Reason {
			case api.ReasonNotFound:
				allowedProbes++
			case api.ReasonBudgetExhausted:
				return allowedProbes
			default:
				t.Fatalf("probe %d: %s", n, res.Reason)
			}
		}
		return allowedProbes
	}
	if got := spend(""); got != 3 {
		t.Fatalf("orch's own probes before budget_exhausted: %d, want 3", got)
	}
	total := 0
	for i := range 4 {
		tc := h.mint(api.TokenRequest{Tools: []string{"read_file"}, Subject: fmt.Sprintf("fresh-%d", i), TTLSeconds: 600})
		total += spend(tc.Token)
		if _, err := h.c.RevokeToken(context.Background(), tc.ID); err != nil {
			t.Fatal(err)
		}
	}
	if total > 3 {
		t.Fatalf("%d probes got through tokens orch minted after its own budget was spent; its tokens share one budget of 3", total)
	}
	// The minter's tokens are locked out; an approver resets them.
	tc := h.mint(api.TokenRequest{Tools: []string{"read_file"}, TTLSeconds: 600})
	wantReason(t, callWith(t, h.as(tc.Token, -1), "read_file", map[string]string{"path": "workspace/src/pkg/a.txt"}, ""),
		api.ReasonBudgetExhausted, "a new token's read while orch's tokens' budget is spent")
	if _, err := h.as("", 4243).ResetBudget(context.Background(), "tokens:orch"); err != nil {
		t.Fatal(err)
	}
	wantReason(t, callWith(t, h.as(tc.Token, -1), "read_file", map[string]string{"path": "workspace/src/pkg/a.txt"}, ""),
		api.ReasonAllowed, "the token's read after the reset of tokens:orch")
}
