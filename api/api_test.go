package api

import (
	"os"
	"strings"
	"testing"
)

// TestReasonsDocumented: reason codes are a stable contract, so each one
// is listed once in Reasons and has a row in README's reason code table.
func TestReasonsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n## Reason codes\n")
	if !ok {
		t.Fatal("README has no \"## Reason codes\" section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	seen := map[Reason]bool{}
	for _, r := range Reasons {
		if seen[r] {
			t.Errorf("%s is listed twice in Reasons", r)
		}
		seen[r] = true
		if !strings.Contains(table, "| `"+string(r)+"`") && !strings.Contains(table, ", `"+string(r)+"`") {
			t.Errorf("README's reason code table has no row for %s", r)
		}
	}
	if !seen[ReasonBusy] {
		t.Error("ReasonBusy is missing from Reasons")
	}
}
