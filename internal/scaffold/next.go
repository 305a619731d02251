package scaffold

import (
	"fmt"
	"strings"
)

// Next is what NextSteps needs to say what to run after init.
type Next struct {
	Manifest string // the file written, absolute
	Dir      string // the project
	Format   Format
	Agent    string // the agent's user name, or its uid
	// AgentIsRoot: root reaches the socket anyway.
	AgentIsRoot bool
	// SocketGroup is the group the service's socket belongs to (sluice),
	// and whether it exists on this host.
	SocketGroup       string
	SocketGroupExists bool
}

// serviceManifest is where the service (scripts/sluiced.service) reads its
// manifest; serviceExec is its ExecStart's other flags.
const (
	serviceManifest = "/etc/sluice/manifest.json"
	serviceExec     = "/usr/local/bin/sluiced --manifest /etc/sluice/manifest.toml --state-dir /var/lib/sluice --shutdown-grace 10s"
)

// NextSteps is the text printed after a manifest is written: check it,
// point the service at it, let the agent reach the socket, wire a client.
func NextSteps(n Next) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("Next:")
	p("  1. Read it and adjust it (every key has a comment%s). Check it as sluiced will load it:", map[bool]string{true: "; JSON has none: they are printed above", false: ""}[n.Format == JSON])
	p("       sudo sluiced --check --manifest %s", n.Manifest)
	p("  2. Point the service at it (scripts/sluiced.service reads %s):", serviceManifest)
	if n.Format == JSON {
		p("       sudo install -m 0640 %s %s", n.Manifest, serviceManifest)
	} else {
		p("       sudo install -m 0640 %s /etc/sluice/manifest.toml", n.Manifest)
	}
	p("     and let the service see and change the project: sudo systemctl edit sluiced.service, then add")
	p("       [Service]")
	if n.Format != JSON {
		p("       ExecStart=")
		p("       ExecStart=%s", serviceExec)
	}
	p("       ReadWritePaths=%s", n.Dir)
	if n.Dir == "/home" || strings.HasPrefix(n.Dir, "/home/") || n.Dir == "/root" || strings.HasPrefix(n.Dir, "/root/") {
		p("       ProtectHome=tmpfs")
		p("       BindPaths=%s", n.Dir)
		p("     (the unit hides /home and /root; these show the project alone: docs/operating.md)")
	}
	p("       sudo systemctl daemon-reload && sudo systemctl restart sluiced")
	p("     After later edits of the manifest: sudo systemctl reload sluiced (an invalid one is refused,")
	p("     and the one in force stays; journalctl -u sluiced says why).")
	if n.AgentIsRoot {
		p("  3. The agent is root, which reaches the socket (0660, group %s) anyway; an agent of its own", n.SocketGroup)
		p("     user (sluice init --agent USER) needs: sudo usermod -aG %s USER", n.SocketGroup)
	} else {
		p("  3. Let the agent's user reach the socket (0660, group %s):", n.SocketGroup)
		if !n.SocketGroupExists {
			p("       sudo groupadd --system %s      # scripts/install.sh makes it; this host has none yet", n.SocketGroup)
		}
		p("       sudo usermod -aG %s %s          # then log in again", n.SocketGroup, n.Agent)
	}
	p("  4. Wire your agent to sluice (writes the client's MCP entry, turns off its own file and shell tools):")
	p("       sluice client setup claude|codex|gemini|cursor|vscode")
	p("  5. Prove the round trip as the agent's user:")
	p("       sluice client check")
	p("Paths in calls are relative to the project (base): read_file {\"path\": \"README.md\"}.")
	return b.String()
}
