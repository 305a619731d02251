package clientsetup

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"
)

// TestREADMEMatchesSetup: the README's per-client blocks say what setup
// writes: Claude's deny list, Codex's keys, Gemini's policy rule (the
// entries themselves are run by e2e TestREADMEAgentRecipes).
func TestREADMEMatchesSetup(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "## Use it from your agent")
	if start < 0 {
		t.Fatal(`README.md has no "## Use it from your agent" section`)
	}
	sec := doc[start+3:]
	if end := strings.Index(sec, "\n## "); end >= 0 {
		sec = sec[:end]
	}
	var sawClaude, sawCodex, sawGemini bool
	blocks := strings.Split(sec, "```")
	for i := 1; i < len(blocks); i += 2 {
		lang, body, _ := strings.Cut(blocks[i], "\n")
		switch lang {
		case "json":
			var v struct {
				Permissions *struct{ Deny, Allow []string } `json:"permissions"`
			}
			if json.Unmarshal([]byte(body), &v) == nil && v.Permissions != nil {
				sawClaude = true
				if !slices.Equal(v.Permissions.Deny, claudeDeny) || !slices.Equal(v.Permissions.Allow, []string{"mcp__sluice"}) {
					t.Errorf("README's Claude permissions %+v, setup writes deny %v allow [mcp__sluice]", v.Permissions, claudeDeny)
				}
			}
		case "toml":
			var v map[string]any
			if err := toml.Unmarshal([]byte(body), &v); err != nil {
				t.Fatalf("README toml block: %v", err)
			}
			if v["mcp_servers"] != nil {
				sawCodex = true
				want := map[string]any{}
				Clients["codex"].files(Options{Scope: ScopeUser, Command: "sluice", Socket: "/run/sluice/sluice.sock"})[0].edit(want)
				got, _ := json.Marshal(v)
				wantJSON, _ := json.Marshal(want)
				if string(got) != string(wantJSON) {
					t.Errorf("README's Codex block:\n%s\nsetup writes:\n%s", got, wantJSON)
				}
			}
			if v["rule"] != nil {
				sawGemini = true
				var want map[string]any
				toml.Unmarshal(geminiPolicy(), &want)
				delete(want["rule"].([]any)[0].(map[string]any), "deny_message")
				gj, _ := json.Marshal(v)
				wj, _ := json.Marshal(want)
				if string(gj) != string(wj) {
					t.Errorf("README's Gemini rule:\n%s\nsetup writes:\n%s", gj, wj)
				}
			}
		}
	}
	if !sawClaude || !sawCodex || !sawGemini {
		t.Errorf("README blocks found: Claude permissions %v, Codex config %v, Gemini rule %v; want all", sawClaude, sawCodex, sawGemini)
	}
}
