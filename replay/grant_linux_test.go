package replay

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
)

// TestGrantedCallReplaysApproved: a call a grant let run without waiting
// (its decision names the grant, which has its own record) is re-decided
// as approved under the same manifest; one naming a grant the ledger does
// not hold is not.
func TestGrantedCallReplaysApproved(t *testing.T) {
	const m = `{"schema_version":1,"principals":{"agent":{"uids":[1000],"tools":["*"]},"ops":{"uids":[0],"approver":true,"tools":[]}},
	  "tools":{"ask":{"operation":"read","roots":["ws/src"],"approval":"human"}}}`
	p := filepath.Join(t.TempDir(), "audit.jsonl")
	l, _, err := audit.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(map[string]string{"path": "ws/src/a.py"})
	res, _ := json.Marshal(ok("ws/src", "a.py"))
	agent := &audit.Principal{Name: "agent", UID: 1000, GID: 1000}
	for _, r := range []*audit.Record{
		{Kind: audit.KindGrant, Grant: "g-1", ApprovalID: "a-1", Principal: &audit.Principal{Name: "ops"}, Tool: "ask", Task: "t", Verdict: api.VerdictAllow},
		{Kind: audit.KindDecision, CallID: "c-1", Tool: "ask", Task: "t", Args: args, Resolved: res, Principal: agent, Verdict: api.VerdictAllow, Reason: api.ReasonAllowed, Grant: "g-1"},
		{Kind: audit.KindDecision, CallID: "c-2", Tool: "ask", Task: "t", Args: args, Resolved: res, Principal: agent, Verdict: api.VerdictAllow, Reason: api.ReasonAllowed, Grant: "g-forged"},
	} {
		if _, err := l.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep := run(t, m, p)
	if rep.Decisions != 2 || rep.Changed != 1 || rep.Changes[0].CallID != "c-2" || rep.Changes[0].NewReason != api.ReasonApprovalRequired {
		t.Fatalf("%s: %+v", rep.Summary(), rep.Changes)
	}
}
