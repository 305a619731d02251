//go:build linux

package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestApprovalNoteReachesTheAgent: the note an approver gives deciding a
// call is in that call's result, denied or approved, buffered or
// streamed (before, it went only to the ledger).
func TestApprovalNoteReachesTheAgent(t *testing.T) {
	_, m := parkFixture(t)
	h := start(t, m, securefs.ModeAuto)
	agent := clientAs(h.socket, agentUID)
	defer agent.Close()
	for _, c := range []struct {
		approve bool
		note    string
		want    api.Reason
	}{
		{false, "use the staging copy, not src", api.ReasonApprovalDenied},
		{true, "ok this once", api.ReasonAllowed},
		{false, "", api.ReasonApprovalDenied},
	} {
		s := startStream(agent, context.Background(), api.CallRequest{Tool: "ask_read",
			Args: mustJSON(map[string]string{"path": "workspace/src/a.py"})})
		s.next(t, "pending")
		list := waitListed(t, h, 1)
		if _, err := h.c.Decide(context.Background(), list[0].ApprovalID, c.approve, c.note); err != nil {
			t.Fatal(err)
		}
		r := s.wait(t)
		if r.Reason != c.want || r.ApprovalNote != c.note {
			t.Errorf("decided %v with note %q: reason %s, approval_note %q", c.approve, c.note, r.Reason, r.ApprovalNote)
		}
	}
}

// TestInvalidArgsDetail: an invalid_args denial says what is wrong with
// the args in detail; under deny_detail "opaque" it says nothing.
func TestInvalidArgsDetail(t *testing.T) {
	testutil.RequireRoot(t)
	for _, opaque := range []bool{false, true} {
		dir := t.TempDir()
		detail := ""
		if opaque {
			detail = `"deny_detail":"opaque",`
		}
		m := writeManifest(t, dir, `{"schema_version":1,`+detail+`"tools":{"r":{"operation":"read","roots":["."]}}}`)
		h := start(t, m, securefs.ModeAuto)
		res, body := h.call("r", map[string]string{})
		switch {
		case opaque && (res.Reason != api.ReasonUnavailable || strings.Contains(string(body), "detail")):
			t.Errorf("opaque: %s", body)
		case !opaque && (res.Reason != api.ReasonInvalidArgs || res.Detail != "args.path: required"):
			t.Errorf("reason: %s", body)
		}
	}
}
