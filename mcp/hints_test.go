package mcp

import (
	"testing"

	"github.com/sluicehq/sluice/api"
)

// The bridge renders any operation's annotations from the hints its unit
// publishes over /v1/tools: an operation it has never heard of needs no
// change here.
func TestAnnotationsFromPublishedHints(t *testing.T) {
	for _, tc := range []struct {
		name           string
		tool           api.Tool
		ro, idem, open bool
		destructive    *bool // nil: not set
	}{
		{"stat", api.Tool{Operation: "stat", Hints: api.ToolHints{ReadOnly: true, Idempotent: true}}, true, true, false, nil},
		{"search", api.Tool{Operation: "search", Hints: api.ToolHints{ReadOnly: true}}, true, false, false, nil},
		{"move", api.Tool{Operation: "move", Hints: api.ToolHints{Destructive: true}}, false, false, false, ptr(true)},
		{"mkdir", api.Tool{Operation: "mkdir", Hints: api.ToolHints{Idempotent: true}}, false, true, false, ptr(false)},
		{"networked", api.Tool{Operation: "crawl", Network: true, Hints: api.ToolHints{ReadOnly: true}}, true, false, true, nil},
	} {
		a := annotations(tc.tool)
		if a.ReadOnlyHint != tc.ro || a.IdempotentHint != tc.idem || a.OpenWorldHint == nil || *a.OpenWorldHint != tc.open ||
			(a.DestructiveHint == nil) != (tc.destructive == nil) || (a.DestructiveHint != nil && *a.DestructiveHint != *tc.destructive) {
			t.Errorf("%s: got %+v", tc.name, a)
		}
	}
}

func ptr(b bool) *bool { return &b }

// A tool whose hints or network change is re-added (its annotations are
// sent again with tools/list_changed).
func TestSameToolSeesHintsAndNetwork(t *testing.T) {
	a := api.Tool{Name: "x", Operation: "move", Hints: api.ToolHints{Destructive: true}}
	b := a
	b.Hints = api.ToolHints{Destructive: true}
	if !sameTool(a, b) {
		t.Fatal("equal hints seen as a change")
	}
	b.Hints = api.ToolHints{ReadOnly: true}
	if sameTool(a, b) {
		t.Fatal("changed hints not seen")
	}
	b = a
	b.Network = true
	if sameTool(a, b) {
		t.Fatal("changed network not seen")
	}
}
