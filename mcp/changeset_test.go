package mcp

import (
	"encoding/json"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sluicehq/sluice/api"
)

// TestToolResultChangeset: a command's changeset reaches the agent in
// structuredContent (every change, committed, dropped) and in a text line
// per change, a refused one with its reason, and the result is an error
// when the changeset did not commit.
func TestToolResultChangeset(t *testing.T) {
	no, exit := false, 0
	res := toolResult(&api.CallResult{Verdict: api.VerdictAllow, Reason: api.ReasonNeverListed, OK: false, CallID: "c1",
		ExitCode: &exit, Committed: &no, Dropped: 2, Changes: []api.Change{
			{Path: "workspace/src/a.py", Action: "modify", Bytes: 3, SHA256: "sha256:x"},
			{Path: "workspace/src/.env", Action: "create", Bytes: 2, Reason: api.ReasonNeverListed, Rule: "tools.fmt.never[0]"},
		}}, nil, nil, func(s string) string { return s })
	if !res.IsError {
		t.Error("a refused changeset is not an error")
	}
	var text []string
	for _, c := range res.Content {
		text = append(text, c.(*sdk.TextContent).Text)
	}
	all := strings.Join(text, "\n")
	for _, want := range []string{"changeset not committed: 2 change(s), 2 path(s) dropped by keep",
		"modify workspace/src/a.py", "create workspace/src/.env: never_listed", "reason never_listed"} {
		if !strings.Contains(all, want) {
			t.Errorf("text lacks %q:\n%s", want, all)
		}
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var sc struct {
		Changes   []api.Change `json:"changes"`
		Committed *bool        `json:"committed"`
		Dropped   int          `json:"dropped"`
	}
	if err := json.Unmarshal(b, &sc); err != nil || len(sc.Changes) != 2 || sc.Committed == nil || *sc.Committed || sc.Dropped != 2 ||
		sc.Changes[1].Rule != "tools.fmt.never[0]" {
		t.Errorf("structuredContent: %s (%v)", b, err)
	}
	var schema map[string]any
	if err := json.Unmarshal([]byte(outputSchema), &schema); err != nil {
		t.Fatalf("outputSchema: %v", err)
	}
}
