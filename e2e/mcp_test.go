//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/pelletier/go-toml/v2"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestMCPStdio: the real `sluice mcp` binary, spawned over stdio by the
// Go SDK's CommandTransport as an agent would, against the real sluiced:
// stdout carries only the protocol (the client parses every line), logs go
// to stderr, it lists and calls the tools and shows a denial as a tool
// error, and it exits by itself (status 0) once its stdin closes.
func TestMCPStdio(t *testing.T) {
	fx := escapetest.Build(t)
	d := startOwnDaemon(t, fx.Manifest)
	cmd := exec.Command(filepath.Join(binDir, "sluice"), "mcp", "--socket", d.socket)
	stderr := &testutil.LockedBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "0"}, nil)
	// A long TerminateDuration: if the bridge did not exit on stdin's
	// close, Close would SIGTERM it and the exit status would say so.
	cs, err := c.Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second},
		&sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connect to sluice mcp: %v\n%s", err, stderr)
	}
	if ir := cs.InitializeResult(); ir.ServerInfo.Name != "sluice" || ir.ServerInfo.Version != api.Version {
		t.Fatalf("initialize: %+v", ir.ServerInfo)
	}
	lt, err := cs.ListTools(ctx, nil)
	if err != nil || len(lt.Tools) == 0 {
		t.Fatalf("tools/list: %+v %v\n%s", lt, err, stderr)
	}
	text := func(r *sdk.CallToolResult) string {
		var b strings.Builder
		for _, c := range r.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "workspace/src/a.py"}})
	if err != nil || res.IsError || text(res) != "print('hello')\n" {
		t.Fatalf("read_file: %+v %v\n%s", res, err, stderr)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "workspace/src/.env"}})
	if err != nil || !res.IsError || !strings.Contains(text(res), "never_listed") || strings.Contains(text(res), escapetest.Secret) {
		t.Fatalf("denied read_file: %+v %v", res, err)
	}
	began := time.Now()
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("sluice mcp after stdin closed: %v (after %v)\n%s", cmd.ProcessState, time.Since(began), stderr)
	}
}

// readmeRecipe is one way the README tells a user to start the bridge.
type readmeRecipe struct {
	where string
	argv  []string // command, then args
}

// readmeRecipes reads the README's "Use it from your agent" section and
// returns every MCP server entry it gives (JSON and TOML blocks) and every
// `… mcp add sluice -- COMMAND` line.
func readmeRecipes(t *testing.T) []readmeRecipe {
	t.Helper()
	raw, err := os.ReadFile("../README.md")
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
	var out []readmeRecipe
	type entry struct {
		Command string   `json:"command" toml:"command"`
		Args    []string `json:"args" toml:"args"`
	}
	blocks := strings.Split(sec, "```")
	for i := 1; i < len(blocks); i += 2 {
		lang, body, _ := strings.Cut(blocks[i], "\n")
		switch lang {
		case "json":
			var v struct {
				MCPServers map[string]entry `json:"mcpServers"`
				Servers    map[string]entry `json:"servers"`
			}
			// Blocks that are not server entries (permissions) decode to nothing.
			_ = json.Unmarshal([]byte(body), &v)
			for _, m := range []map[string]entry{v.MCPServers, v.Servers} {
				if e, ok := m["sluice"]; ok {
					out = append(out, readmeRecipe{"json block " + strconv.Itoa(i/2+1), append([]string{e.Command}, e.Args...)})
				}
			}
		case "toml":
			var v struct {
				MCPServers map[string]entry `toml:"mcp_servers"`
			}
			if err := toml.Unmarshal([]byte(body), &v); err != nil {
				t.Fatalf("README toml block %d: %v", i/2+1, err)
			}
			if e, ok := v.MCPServers["sluice"]; ok {
				out = append(out, readmeRecipe{"toml block " + strconv.Itoa(i/2+1), append([]string{e.Command}, e.Args...)})
			}
		}
	}
	for _, line := range regexp.MustCompile("`(\\w+) mcp add sluice -- ([^`]+)`").FindAllStringSubmatch(sec, -1) {
		out = append(out, readmeRecipe{line[1] + " mcp add", strings.Fields(line[2])})
	}
	return out
}

// TestREADMEAgentRecipes: every way the README tells a user to start the
// bridge works verbatim for a client that passes the MCP server no
// environment at all (Codex, the MCP Inspector): the socket is in the
// args (docs/security.md "The third review": the recipes relied on
// $SLUICE_SOCKET and failed verbatim). Each recipe runs with an empty
// environment, its socket path pointed at this test's daemon, and must
// answer initialize and tools/list.
func TestREADMEAgentRecipes(t *testing.T) {
	recipes := readmeRecipes(t)
	if len(recipes) < 6 {
		t.Fatalf("found %d recipes in README.md, want the six clients' at least: %+v", len(recipes), recipes)
	}
	fx := escapetest.Build(t)
	d := startOwnDaemon(t, fx.Manifest)
	for _, r := range recipes {
		t.Run(r.where, func(t *testing.T) {
			argv := slices.Clone(r.argv)
			i := slices.Index(argv, "--socket")
			if argv[0] != "sluice" || len(argv) < 2 || argv[1] != "mcp" || i < 0 || i+1 >= len(argv) {
				t.Fatalf("README recipe %q: want `sluice mcp --socket PATH` (clients that pass no environment never see $SLUICE_SOCKET)", argv)
			}
			if argv[i+1] != api.DefaultSocket {
				t.Errorf("README recipe %q names socket %s, want the service's %s", argv, argv[i+1], api.DefaultSocket)
			}
			argv[0], argv[i+1] = filepath.Join(binDir, "sluice"), d.socket
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = []string{} // as Codex and the Inspector start MCP servers
			stderr := &testutil.LockedBuffer{}
			cmd.Stderr = stderr
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c := sdk.NewClient(&sdk.Implementation{Name: "readme", Version: "0"}, nil)
			cs, err := c.Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}, nil)
			if err != nil {
				t.Fatalf("%q with no environment: %v\n%s", r.argv, err, stderr)
			}
			defer cs.Close()
			lt, err := cs.ListTools(ctx, nil)
			if err != nil || len(lt.Tools) == 0 {
				t.Fatalf("%q with no environment: tools/list: %+v %v\n%s", r.argv, lt, err, stderr)
			}
		})
	}
}
