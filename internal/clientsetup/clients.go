package clientsetup

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Each client's names were read from the client's own package (npm) at
// the version in Checked, and from its documentation; a newer client
// that renames a tool needs a new list here (docs/clients.md says how
// to check).

// Claude Code 2.1.332 (@anthropic-ai/claude-code): its built-in tools, by
// the names its permission rules take (read from the bundled binary:
// `var X="Bash"`, ...). Monitor and REPL run commands, LSP reads code,
// PowerShell is Bash's twin on Windows; MultiEdit is gone since 2.x but
// an older Claude Code still honours the rule.
var claudeDeny = []string{
	"Bash", "PowerShell", "Monitor", "REPL",
	"Read", "Edit", "Write", "MultiEdit", "NotebookEdit", "Glob", "Grep", "LSP",
	"WebFetch", "WebSearch",
}

// Gemini CLI 0.61.0 (@google/gemini-cli): the built-in tools'
// names (packages/core tool-names: *_TOOL_NAME). search_file_content
// was renamed grep_search; tools.exclude is deprecated for the Policy
// Engine, so they are denied by a user-tier policy rule.
var geminiDeny = []string{
	"run_shell_command", "write_file", "replace", "read_file", "read_many_files",
	"list_directory", "glob", "grep_search", "web_fetch", "google_web_search",
}

// geminiPriority is the rule's priority within its tier: above the
// "always allow" rules a user grants in the UI (4.95 in the user tier).
const geminiPriority = 999

// Codex CLI 0.171.0 (@openai/codex): the [features] keys that remove its
// own tools (`codex features list`; checked with `codex debug
// prompt-input`, which renders the tools the model is given):
// shell_tool and unified_exec (exec_command, write_stdin), view_image
// (reads any local image). web_search = "disabled" turns off its web
// search. apply_patch has no switch in 0.171 (the model catalog decides
// it): sandbox_mode = "read-only" and approval_policy = "on-request" make
// every edit of its own ask first ("untrusted" is refused by 0.171:
// "no longer supported").
var codexFeaturesOff = []string{"shell_tool", "unified_exec", "view_image"}

func init() {
	register(&Client{
		Name: "claude", Title: "Claude Code", Checked: "2.1.332",
		DefaultScope: ScopeUser, Scopes: []Scope{ScopeUser, ScopeProject},
		files: func(o Options) []fileEdit {
			entry := func(doc map[string]any) {
				obj(doc, "mcpServers")[ServerName] = map[string]any{"command": o.Command, "args": strAny(o.Args())}
			}
			perms := func(doc map[string]any) {
				p := obj(doc, "permissions")
				addStrings(p, "deny", claudeDeny)
				addStrings(p, "allow", []string{"mcp__" + ServerName})
				removeStrings(p, "deny", []string{"mcp__" + ServerName})
			}
			if o.Scope == ScopeUser {
				return []fileEdit{
					// `claude mcp add --scope user` writes here
					{path: filepath.Join(o.Home, ".claude.json"), format: formatJSON, edit: entry},
					{path: filepath.Join(o.Home, ".claude", "settings.json"), format: formatJSON, edit: perms},
				}
			}
			return []fileEdit{
				{path: filepath.Join(o.Dir, ".mcp.json"), format: formatJSON, edit: entry},
				{path: filepath.Join(o.Dir, ".claude", "settings.json"), format: formatJSON, edit: perms},
				// A project's .mcp.json servers stay "Pending approval"
				// until approved: this is the approval, for this user.
				{path: filepath.Join(o.Dir, ".claude", "settings.local.json"), format: formatJSON, edit: func(doc map[string]any) {
					addStrings(doc, "enabledMcpjsonServers", []string{ServerName})
					removeStrings(doc, "disabledMcpjsonServers", []string{ServerName})
				}},
				// ... which counts only once the folder is trusted (2.1.332's
				// `claude mcp list`: Pending approval until then): the
				// answer to its trust dialog, for this folder.
				{path: filepath.Join(o.Home, ".claude.json"), format: formatJSON, edit: func(doc map[string]any) {
					obj(obj(doc, "projects"), o.Dir)["hasTrustDialogAccepted"] = true
				}},
			}
		},
		disabled: claudeDeny,
		manual: func(o Options) []string {
			if o.Scope == ScopeProject {
				return []string{fmt.Sprintf("%s is marked trusted in ~/.claude.json (its trust dialog answered yes) and .mcp.json's sluice approved in .claude/settings.local.json; each teammate runs this setup once, or answers Claude Code's trust and approval prompts.", o.Dir)}
			}
			return []string{"Claude Code asks once whether you trust each folder you start it in: answer yes."}
		},
		ServerFiles: func(o Options) []string {
			if o.Scope == ScopeProject {
				return []string{filepath.Join(o.Dir, ".mcp.json")}
			}
			return []string{filepath.Join(o.Home, ".claude.json")}
		},
		entry: serverEntry("mcpServers"),
	})

	register(&Client{
		Name: "codex", Title: "Codex CLI", Checked: "0.171.0",
		DefaultScope: ScopeUser, Scopes: []Scope{ScopeUser, ScopeProject},
		files: func(o Options) []fileEdit {
			cfg := func(doc map[string]any) {
				obj(doc, "mcp_servers")[ServerName] = map[string]any{"command": o.Command, "args": strAny(o.Args())}
				f := obj(doc, "features")
				for _, k := range codexFeaturesOff {
					f[k] = false
				}
				doc["web_search"] = "disabled"
				doc["sandbox_mode"] = "read-only"
				doc["approval_policy"] = "on-request"
			}
			user := filepath.Join(o.Home, ".codex", "config.toml")
			if o.Scope == ScopeUser {
				return []fileEdit{{path: user, format: formatTOML, edit: cfg}}
			}
			return []fileEdit{
				{path: filepath.Join(o.Dir, ".codex", "config.toml"), format: formatTOML, edit: cfg},
				// Codex reads a project's .codex/config.toml only in a trusted project.
				{path: user, format: formatTOML, edit: func(doc map[string]any) {
					obj(obj(doc, "projects"), o.Dir)["trust_level"] = "trusted"
				}},
			}
		},
		disabled: []string{"shell_tool, unified_exec (exec_command, write_stdin) and view_image: [features] … = false",
			`web search: web_search = "disabled"`,
			`apply_patch (no switch in 0.171): sandbox_mode = "read-only", approval_policy = "on-request" (each of its own edits asks)`},
		manual: func(o Options) []string {
			return []string{"Tell Codex (AGENTS.md) to use sluice's tools: its apply_patch cannot be removed, only made to ask."}
		},
		ServerFiles: func(o Options) []string {
			if o.Scope == ScopeProject {
				return []string{filepath.Join(o.Dir, ".codex", "config.toml"), filepath.Join(o.Home, ".codex", "config.toml")}
			}
			return []string{filepath.Join(o.Home, ".codex", "config.toml")}
		},
		entry: serverEntry("mcp_servers"),
	})

	register(&Client{
		Name: "gemini", Title: "Gemini CLI", Checked: "0.61.0",
		DefaultScope: ScopeUser, Scopes: []Scope{ScopeUser, ScopeProject},
		files: func(o Options) []fileEdit {
			base := filepath.Join(o.Home, ".gemini")
			if o.Scope == ScopeProject {
				base = filepath.Join(o.Dir, ".gemini")
			}
			return []fileEdit{
				{path: filepath.Join(base, "settings.json"), format: formatJSON, edit: func(doc map[string]any) {
					obj(doc, "mcpServers")[ServerName] = map[string]any{"command": o.Command, "args": strAny(o.Args())}
				}},
				// The Policy Engine's rules (tools.exclude is deprecated):
				// user tier (~/.gemini/policies) or workspace tier.
				{path: filepath.Join(base, "policies", "sluice.toml"), format: formatWhole, whole: geminiPolicy()},
				// Gemini keeps MCP servers Disabled in an untrusted folder.
				{path: filepath.Join(o.Home, ".gemini", "trustedFolders.json"), format: formatJSON, edit: func(doc map[string]any) {
					doc[o.Dir] = "TRUST_FOLDER"
				}},
			}
		},
		disabled: geminiDeny,
		manual: func(o Options) []string {
			return []string{fmt.Sprintf("%s is trusted for Gemini (trustedFolders.json); start gemini there, or trust another folder with /permissions.", o.Dir)}
		},
		ServerFiles: func(o Options) []string {
			if o.Scope == ScopeProject {
				return []string{filepath.Join(o.Dir, ".gemini", "settings.json")}
			}
			return []string{filepath.Join(o.Home, ".gemini", "settings.json")}
		},
		entry: serverEntry("mcpServers"),
	})

	register(&Client{
		Name: "cursor", Title: "Cursor", Checked: "documentation of 2026-12",
		DefaultScope: ScopeProject, Scopes: []Scope{ScopeUser, ScopeProject},
		files: func(o Options) []fileEdit {
			return []fileEdit{{path: cursorFile(o), format: formatJSON, edit: func(doc map[string]any) {
				obj(doc, "mcpServers")[ServerName] = map[string]any{"command": o.Command, "args": strAny(o.Args())}
			}}}
		},
		manual: func(o Options) []string {
			return []string{
				"Cursor's own terminal and edit tools cannot be removed from a file: in Settings → Chat keep Auto-Run off, so each of them asks.",
				"Add a project rule (.cursor/rules) telling the agent to use sluice's tools.",
				"Enable the sluice server in Settings → MCP if Cursor lists it as disabled.",
			}
		},
		ServerFiles: func(o Options) []string { return []string{cursorFile(o)} },
		entry:       serverEntry("mcpServers"),
	})

	register(&Client{
		Name: "vscode", Title: "VS Code (Copilot agent mode)", Checked: "documentation of 2026-12",
		DefaultScope: ScopeProject, Scopes: []Scope{ScopeUser, ScopeProject},
		files: func(o Options) []fileEdit {
			return []fileEdit{{path: vscodeFile(o), format: formatJSON, edit: func(doc map[string]any) {
				obj(doc, "servers")[ServerName] = map[string]any{"type": "stdio", "command": o.Command, "args": strAny(o.Args())}
			}}}
		},
		manual: func(o Options) []string {
			return []string{
				"In Chat → Agent → Configure Tools, deselect the built-in edit, terminal, read and fetch tool sets and keep sluice's.",
				"VS Code asks to trust the sluice server the first time it starts it: allow it.",
			}
		},
		ServerFiles: func(o Options) []string { return []string{vscodeFile(o)} },
		entry:       serverEntry("servers"),
	})
}

func cursorFile(o Options) string {
	if o.Scope == ScopeUser {
		return filepath.Join(o.Home, ".cursor", "mcp.json")
	}
	return filepath.Join(o.Dir, ".cursor", "mcp.json")
}

func vscodeFile(o Options) string {
	if o.Scope == ScopeUser {
		return filepath.Join(o.Home, ".config", "Code", "User", "mcp.json")
	}
	return filepath.Join(o.Dir, ".vscode", "mcp.json")
}

// geminiPolicy is the Policy Engine file that denies Gemini's own tools.
func geminiPolicy() []byte {
	var b strings.Builder
	b.WriteString("# Written by `sluice client setup gemini` (names checked at Gemini CLI 0.61.0).\n")
	b.WriteString("# Gemini's own file, shell and web tools are denied: the agent uses sluice's.\n")
	b.WriteString("[[rule]]\ntoolName = [")
	for i, n := range geminiDeny {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", n)
	}
	fmt.Fprintf(&b, "]\ndecision = \"deny\"\npriority = %d\n", geminiPriority)
	b.WriteString("deny_message = \"Turned off by sluice client setup: use the sluice MCP server's tools.\"\n")
	return []byte(b.String())
}
