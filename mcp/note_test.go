package mcp

import (
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sluicehq/sluice/api"
)

// TestApprovalNoteInText: the approver's note reaches the agent in the
// call's text, denied or approved (after the output, apart from it), and
// in structuredContent.
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
			"hi\nThe approver's note: ok this once"},
		{api.CallResult{Verdict: api.VerdictAllow, Reason: api.ReasonAllowed, OK: true}, "hi"},
	} {
		res := toolResult(&c.res, []byte("hi"), nil, id)
		var text []string
		for _, ct := range res.Content {
			text = append(text, ct.(*sdk.TextContent).Text)
		}
		if got := strings.Join(text, "\n"); got != c.want {
			t.Errorf("%+v:\n got %q\nwant %q", c.res, got, c.want)
		}
		if st := res.StructuredContent.(Structured); st.ApprovalNote != c.res.ApprovalNote {
			t.Errorf("%+v: structuredContent's approval_note %q", c.res, st.ApprovalNote)
		}
	}
}
