package clientsetup

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"
)

const sock = "/run/sluice/sluice.sock"

func opts(t *testing.T, scope Scope) Options {
	t.Helper()
	dir := t.TempDir()
	return Options{Scope: scope, Home: filepath.Join(dir, "home"), Dir: filepath.Join(dir, "proj"),
		Command: "/usr/local/bin/sluice", Socket: sock}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func setup(t *testing.T, name string, o Options) *Plan {
	t.Helper()
	p, err := Clients[name].Setup(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	return p
}

// readJSON is path's JSON object.
func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

func strs(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// wantEntry checks sluice's entry in doc under table: the socket in the args.
func wantEntry(t *testing.T, doc map[string]any, table string) {
	t.Helper()
	e := dig(doc, table, ServerName)
	if dig(e, "command") != "/usr/local/bin/sluice" || !slices.Equal(strs(dig(e, "args")), []string{"mcp", "--socket", sock}) {
		t.Errorf("%s.sluice = %v, want sluice mcp --socket %s", table, e, sock)
	}
}

// TestSetupPreservesAndIsIdempotent: for every client and scope, the
// user's other settings survive, a second run changes nothing, and the
// original is kept as .bak.
func TestSetupPreservesAndIsIdempotent(t *testing.T) {
	type check func(t *testing.T, o Options)
	cases := []struct {
		client string
		scope  Scope
		// existing: files and their content before setup
		existing map[string]string
		check    check
	}{
		{"claude", ScopeUser, map[string]string{
			"home/.claude.json":          `{"numStartups": 7, "mcpServers": {"other": {"command": "x"}}}`,
			"home/.claude/settings.json": `{"model": "opus", "permissions": {"deny": ["Bash(rm:*)"], "allow": ["Read(./docs/**)"]}}`,
		}, func(t *testing.T, o Options) {
			st := readJSON(t, filepath.Join(o.Home, ".claude.json"))
			wantEntry(t, st, "mcpServers")
			if dig(st, "numStartups") != 7.0 || dig(st, "mcpServers", "other", "command") != "x" {
				t.Errorf("~/.claude.json lost the user's keys: %v", st)
			}
			s := readJSON(t, filepath.Join(o.Home, ".claude", "settings.json"))
			deny := strs(dig(s, "permissions", "deny"))
			for _, n := range append([]string{"Bash(rm:*)"}, claudeDeny...) {
				if !slices.Contains(deny, n) {
					t.Errorf("deny %v lacks %s", deny, n)
				}
			}
			if !slices.Contains(deny, "WebSearch") {
				t.Errorf("deny %v lacks WebSearch", deny)
			}
			if allow := strs(dig(s, "permissions", "allow")); !slices.Equal(allow, []string{"Read(./docs/**)", "mcp__sluice"}) {
				t.Errorf("allow = %v", allow)
			}
			if dig(s, "model") != "opus" {
				t.Errorf("settings lost model: %v", s)
			}
		}},
		{"claude", ScopeProject, map[string]string{
			"proj/.claude/settings.local.json": `{"disabledMcpjsonServers": ["sluice", "old"]}`,
		}, func(t *testing.T, o Options) {
			wantEntry(t, readJSON(t, filepath.Join(o.Dir, ".mcp.json")), "mcpServers")
			l := readJSON(t, filepath.Join(o.Dir, ".claude", "settings.local.json"))
			if got := strs(l["enabledMcpjsonServers"]); !slices.Equal(got, []string{"sluice"}) {
				t.Errorf("enabledMcpjsonServers = %v", got)
			}
			if got := strs(l["disabledMcpjsonServers"]); !slices.Equal(got, []string{"old"}) {
				t.Errorf("disabledMcpjsonServers = %v, want [old]", got)
			}
			if dig(readJSON(t, filepath.Join(o.Home, ".claude.json")), "projects", o.Dir, "hasTrustDialogAccepted") != true {
				t.Error("the project is not trusted in ~/.claude.json")
			}
		}},
		{"gemini", ScopeUser, map[string]string{
			"home/.gemini/settings.json":       `{"ui": {"theme": "Dracula"}, "tools": {"exclude": ["x"]}}`,
			"home/.gemini/trustedFolders.json": `{"/elsewhere": "TRUST_PARENT"}`,
		}, func(t *testing.T, o Options) {
			s := readJSON(t, filepath.Join(o.Home, ".gemini", "settings.json"))
			wantEntry(t, s, "mcpServers")
			if dig(s, "ui", "theme") != "Dracula" || !slices.Equal(strs(dig(s, "tools", "exclude")), []string{"x"}) {
				t.Errorf("settings lost the user's keys: %v", s)
			}
			tf := readJSON(t, filepath.Join(o.Home, ".gemini", "trustedFolders.json"))
			if tf["/elsewhere"] != "TRUST_PARENT" || tf[o.Dir] != "TRUST_FOLDER" {
				t.Errorf("trustedFolders = %v", tf)
			}
			var pol struct {
				Rule []struct {
					ToolName []string
					Decision string
					Priority int
				}
			}
			raw, _ := os.ReadFile(filepath.Join(o.Home, ".gemini", "policies", "sluice.toml"))
			if err := toml.Unmarshal(raw, &pol); err != nil || len(pol.Rule) != 1 {
				t.Fatalf("policy: %v %+v\n%s", err, pol, raw)
			}
			r := pol.Rule[0]
			if r.Decision != "deny" || r.Priority > 999 || !slices.Contains(r.ToolName, "grep_search") || !slices.Contains(r.ToolName, "google_web_search") {
				t.Errorf("policy rule %+v", r)
			}
		}},
		{"codex", ScopeUser, map[string]string{
			"home/.codex/config.toml": "model = \"gpt-5\"\n[mcp_servers.other]\ncommand = \"x\"\n[features]\nmemories = true\n",
		}, func(t *testing.T, o Options) {
			var c map[string]any
			raw, _ := os.ReadFile(filepath.Join(o.Home, ".codex", "config.toml"))
			if err := toml.Unmarshal(raw, &c); err != nil {
				t.Fatal(err)
			}
			wantEntry(t, c, "mcp_servers")
			if c["model"] != "gpt-5" || dig(c, "mcp_servers", "other", "command") != "x" || dig(c, "features", "memories") != true {
				t.Errorf("config.toml lost the user's keys:\n%s", raw)
			}
			for _, k := range codexFeaturesOff {
				if dig(c, "features", k) != false {
					t.Errorf("features.%s = %v", k, dig(c, "features", k))
				}
			}
			if c["web_search"] != "disabled" || c["sandbox_mode"] != "read-only" || c["approval_policy"] != "on-request" {
				t.Errorf("config.toml:\n%s", raw)
			}
		}},
		{"codex", ScopeProject, nil, func(t *testing.T, o Options) {
			var c, u map[string]any
			raw, _ := os.ReadFile(filepath.Join(o.Dir, ".codex", "config.toml"))
			toml.Unmarshal(raw, &c)
			wantEntry(t, c, "mcp_servers")
			raw, _ = os.ReadFile(filepath.Join(o.Home, ".codex", "config.toml"))
			toml.Unmarshal(raw, &u)
			if dig(u, "projects", o.Dir, "trust_level") != "trusted" {
				t.Errorf("~/.codex/config.toml does not trust the project:\n%s", raw)
			}
		}},
		{"cursor", ScopeProject, map[string]string{
			"proj/.cursor/mcp.json": `{"mcpServers": {"github": {"url": "https://x"}}}`,
		}, func(t *testing.T, o Options) {
			m := readJSON(t, filepath.Join(o.Dir, ".cursor", "mcp.json"))
			wantEntry(t, m, "mcpServers")
			if dig(m, "mcpServers", "github", "url") != "https://x" {
				t.Errorf("lost github: %v", m)
			}
		}},
		{"cursor", ScopeUser, nil, func(t *testing.T, o Options) {
			wantEntry(t, readJSON(t, filepath.Join(o.Home, ".cursor", "mcp.json")), "mcpServers")
		}},
		{"vscode", ScopeProject, map[string]string{
			"proj/.vscode/mcp.json": `{"inputs": [], "servers": {"fs": {"type": "stdio", "command": "npx"}}}`,
		}, func(t *testing.T, o Options) {
			m := readJSON(t, filepath.Join(o.Dir, ".vscode", "mcp.json"))
			wantEntry(t, m, "servers")
			if dig(m, "servers", ServerName, "type") != "stdio" || dig(m, "servers", "fs", "command") != "npx" || m["inputs"] == nil {
				t.Errorf("mcp.json: %v", m)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.client+"/"+string(c.scope), func(t *testing.T) {
			o := opts(t, c.scope)
			base := filepath.Dir(o.Home)
			for p, content := range c.existing {
				write(t, filepath.Join(base, p), content)
			}
			p := setup(t, c.client, o)
			if len(p.Changes) == 0 {
				t.Fatal("the first setup changed nothing")
			}
			c.check(t, o)
			for p, content := range c.existing {
				bak, err := os.ReadFile(filepath.Join(base, p) + ".bak")
				if err != nil || string(bak) != content {
					t.Errorf("%s.bak = %q, %v; want the original", p, bak, err)
				}
			}
			again, err := Clients[c.client].Setup(o)
			if err != nil {
				t.Fatal(err)
			}
			if len(again.Changes) != 0 {
				for _, ch := range again.Changes {
					t.Errorf("the second setup changes %s:\n%s\n→\n%s", ch.Path, ch.Old, ch.New)
				}
			}
			// Entry reads back what setup wrote (sluice client check).
			if _, cmd, args, err := Clients[c.client].Entry(o); err != nil || cmd != o.Command || !slices.Equal(args, o.Args()) {
				t.Errorf("Entry = %q %q %v", cmd, args, err)
			}
		})
	}
}

// TestSetupKeepsBackupOnce: the .bak is the user's original, not
// overwritten by a later run.
func TestSetupKeepsBackupOnce(t *testing.T) {
	o := opts(t, ScopeProject)
	f := filepath.Join(o.Dir, ".cursor", "mcp.json")
	write(t, f, `{"mcpServers": {}}`)
	setup(t, "cursor", o)
	o.Socket = "/tmp/other.sock"
	setup(t, "cursor", o)
	if bak, _ := os.ReadFile(f + ".bak"); string(bak) != `{"mcpServers": {}}` {
		t.Errorf(".bak = %q, want the original", bak)
	}
	wantArgs := []string{"mcp", "--socket", "/tmp/other.sock"}
	if got := strs(dig(readJSON(t, f), "mcpServers", ServerName, "args")); !slices.Equal(got, wantArgs) {
		t.Errorf("args = %v, want %v", got, wantArgs)
	}
}

// TestSetupRefusesBadFile: a file that does not parse is named with its
// line and column, and nothing is written.
func TestSetupRefusesBadFile(t *testing.T) {
	for _, c := range []struct{ client, file, content, want string }{
		{"claude", "home/.claude/settings.json", "{\n  \"model\": \"opus\",\n}\n", "settings.json:3:1"},
		{"vscode", "proj/.vscode/mcp.json", "{\n  // a comment\n  \"servers\": {}\n}\n", "mcp.json:2:3"},
		{"cursor", "proj/.cursor/mcp.json", "[1, 2]", "want a JSON object"},
		{"codex", "home/.codex/config.toml", "model = \"gpt-5\"\n[features\nx = 1\n", "config.toml:2:"},
	} {
		t.Run(c.client, func(t *testing.T) {
			o := opts(t, "")
			path := filepath.Join(filepath.Dir(o.Home), c.file)
			write(t, path, c.content)
			_, err := Clients[c.client].Setup(o)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("err = %v, want %s naming %s", err, c.want, path)
			}
			if got, _ := os.ReadFile(path); string(got) != c.content {
				t.Errorf("the bad file was changed: %q", got)
			}
			if _, err := os.Stat(path + ".bak"); err == nil {
				t.Error("a .bak was written for a refused file")
			}
		})
	}
}

// TestSetupPlanWritesNothing: Setup only plans (--dry-run prints the
// plan); Apply writes.
func TestSetupPlanWritesNothing(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			o := opts(t, "")
			p, err := Clients[name].Setup(o)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Changes) == 0 {
				t.Fatal("no changes planned")
			}
			for _, ch := range p.Changes {
				if _, err := os.Stat(ch.Path); err == nil {
					t.Errorf("planning wrote %s", ch.Path)
				}
			}
			if _, err := os.Stat(filepath.Dir(o.Home)); err != nil {
				t.Fatal(err)
			}
			if ents, _ := os.ReadDir(filepath.Dir(o.Home)); len(ents) != 0 {
				t.Errorf("planning created %v", ents)
			}
		})
	}
}

// TestSetupUnknownScope: a scope the client lacks is refused.
func TestSetupUnknownScope(t *testing.T) {
	if _, err := Clients["claude"].Setup(Options{Scope: "system"}); err == nil {
		t.Fatal("scope system accepted")
	}
}
