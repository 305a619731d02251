package api

import (
	"os"
	"strings"
	"testing"
)

// TestReasonsDocumented: reason codes are a stable contract, so each one
// is listed once in Reasons and has a row in docs/reasons.md's table.
func TestReasonsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/reasons.md")
	if err != nil {
		t.Fatal(err)
	}
	table := string(doc)
	seen := map[Reason]bool{}
	for _, r := range Reasons {
		if seen[r] {
			t.Errorf("%s is listed twice in Reasons", r)
		}
		seen[r] = true
		if !strings.Contains(table, "| `"+string(r)+"`") && !strings.Contains(table, ", `"+string(r)+"`") {
			t.Errorf("docs/reasons.md has no row for %s", r)
		}
	}
	if !seen[ReasonBusy] {
		t.Error("ReasonBusy is missing from Reasons")
	}
}
