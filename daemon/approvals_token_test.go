//go:build linux

package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/securefs"
)

// TestSelfApprovalThroughToken: a call made with a delegation token is
// decided as the token's minter, but it is still the call of the peer
// that made it: an approver principal that presents another principal's
// token cannot approve the call it made with it (403), any more than
// the minter can.
func TestSelfApprovalThroughToken(t *testing.T) {
	_, m := scaleFixture(t)
	h := start(t, m, securefs.ModeAuto)
	ctx := context.Background()
	agent := clientAs(h.socket, agentUID)
	defer agent.Close()
	tc, err := agent.CreateToken(ctx, api.TokenRequest{Tools: []string{"grant_read"}, Subject: "sub"})
	if err != nil {
		t.Fatal(err)
	}
	bob := clientAs(h.socket, bobUID) // an approver, holding agent's token
	defer bob.Close()
	if err := bob.SetToken(tc.Token); err != nil {
		t.Fatal(err)
	}
	s := startStream(bob, ctx, api.CallRequest{Tool: "grant_read", Args: pathArgs("workspace/src/a.py")})
	id := s.next(t, "pending").ApprovalID
	bobSelf := clientAs(h.socket, bobUID)
	defer bobSelf.Close()
	if _, err := bobSelf.Decide(ctx, id, true, "mine through a token"); !isStatus(err, 403) || !strings.Contains(err.Error(), "may not approve a call of its own") {
		t.Fatalf("bob approving the call he made with agent's token: %v", err)
	}
	if _, err := agent.Decide(ctx, id, true, ""); err == nil {
		t.Fatal("agent (no approver) approved")
	}
	if o, err := h.c.Decide(ctx, id, true, ""); err != nil || !o.Approved {
		t.Fatalf("ops: %+v %v", o, err)
	}
	if res := s.wait(t); res.Verdict != api.VerdictAllow || !res.OK {
		t.Fatalf("approved by ops: %+v", res)
	}
}
