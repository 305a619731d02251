package mcp

import (
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sluicehq/sluice/api"
)

// TestApprovalNoteInText: the approver's note on a denied call reaches
// the agent in the call's text (an approved call's text is its output
// alone, as before).
func TestApprovalNoteInText(t *testing.T) {
	id := func(s string) string { return s }
	for _, c := range []struct {
		res  api.CallResult
		want string
	}{
		{api.CallResult{Verdict: api.VerdictDeny, Reason: api.ReasonApprovalDenied, ApprovalNote: "use the staging copy"},
			"sluice denied this call: approval_denied\nThe approver's note: use the staging copy"},
		{api.CallResult{Verdict: api.VerdictDeny, Reason: api.ReasonApprovalDenied},
			"sluice denied this call: approval_denied"},
		{api.CallResult{Verdict: api.VerdictAllow, Reason: api.ReasonAllowed, OK: true, ApprovalNote: "ok this once"},
			"hi"},
	} {
		res := toolResult(&c.res, []byte("hi"), nil, id)
		var text []string
		for _, ct := range res.Content {
			text = append(text, ct.(*sdk.TextContent).Text)
		}
		if got := strings.Join(text, "\n"); got != c.want {
			t.Errorf("%+v:\n got %q\nwant %q", c.res, got, c.want)
		}
	}
}
