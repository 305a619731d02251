//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/escapetest"
)

// The real MCP clients, installed from npm by scripts/agent-clients.sh
// into a cache directory, wired to a daemon with `sluice client setup`
// (issue 27, DESIGN §10 "First hour"). No model is involved: each
// client's own listing of its MCP servers (or the Inspector's CLI) is
// the proof. Each test logs the time from setup to a listed sluice and
// what the client printed.

var agentClients struct {
	once sync.Once
	dir  string
	err  error
	skip bool
}

// clientBin is the path of a client's executable (claude, gemini, codex,
// mcp-inspector), installing them once; skipped loudly only when the
// registry cannot be reached.
func clientBin(t *testing.T, pkg, bin string) string {
	t.Helper()
	agentClients.once.Do(func() {
		cmd := exec.Command("../scripts/agent-clients.sh")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee) && ee.ExitCode() == 3:
			agentClients.skip, agentClients.err = true, fmt.Errorf("%s", stderr.String())
		case err != nil:
			agentClients.err = fmt.Errorf("scripts/agent-clients.sh: %v\n%s", err, stderr.String())
		default:
			agentClients.dir = strings.TrimSpace(string(out))
		}
	})
	if agentClients.skip {
		t.Skipf("SKIPPED LOUDLY: the real MCP clients cannot be installed, the npm registry is unreachable: %v", agentClients.err)
	}
	if agentClients.err != nil {
		t.Fatal(agentClients.err)
	}
	return filepath.Join(agentClients.dir, pkg, "node_modules", ".bin", bin)
}

// clientEnv is a fresh HOME and project directory for one client.
type clientEnv struct {
	home, proj string
	d          *daemon
}

func newClientEnv(t *testing.T) *clientEnv {
	t.Helper()
	fx := escapetest.Build(t)
	ce := &clientEnv{home: t.TempDir(), proj: t.TempDir()}
	ce.d = startOwnDaemon(t, fx.Manifest)
	return ce
}

// env is the environment a client runs in: this HOME, a PATH with node.
func (ce *clientEnv) env() []string {
	return []string{"HOME=" + ce.home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8", "NO_COLOR=1", "CI=1"}
}

// run runs name args in the project directory as the client's user.
func (ce *clientEnv) run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = ce.proj, ce.env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// setup runs `sluice client setup CLIENT` and returns when it did.
func (ce *clientEnv) setup(t *testing.T, client string, extra ...string) time.Time {
	t.Helper()
	start := time.Now()
	out, err := ce.run(t, filepath.Join(binDir, "sluice"), append([]string{"--socket", ce.d.socket, "client", "setup", client}, extra...)...)
	if err != nil {
		t.Fatalf("sluice client setup %s: %v\n%s", client, err, out)
	}
	t.Logf("sluice client setup %s:\n%s", client, out)
	return start
}

// check runs `sluice client check CLIENT`.
func (ce *clientEnv) check(t *testing.T, client string, extra ...string) (string, error) {
	return ce.run(t, filepath.Join(binDir, "sluice"), append([]string{"--socket", ce.d.socket, "client", "check", client}, extra...)...)
}

func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// TestClientClaude: after `sluice client setup claude`, `claude mcp list`
// shows sluice Connected (user and project scope, the latter approved and
// trusted by setup), `sluice client check claude` proves the round trip,
// and with sluiced down both show the failure and its hint.
func TestClientClaude(t *testing.T) {
	claude := clientBin(t, "claude", "claude")
	ce := newClientEnv(t)
	for _, scope := range []string{"user", "project"} {
		start := ce.setup(t, "claude", "--scope", scope)
		out, err := ce.run(t, claude, "mcp", "list")
		l := lineWith(out, "sluice:")
		if err != nil || !strings.Contains(l, "Connected") {
			t.Fatalf("claude mcp list (%s scope): %v\n%s", scope, err, out)
		}
		t.Logf("Claude Code 2.1.332, %s scope: %v from setup to listed: %s", scope, time.Since(start).Round(time.Millisecond), l)
		out, err = ce.check(t, "claude", "--scope", scope)
		if err != nil || !strings.Contains(out, "ok read: read_file workspace/src/") || !strings.Contains(out, "ok denial:") {
			t.Fatalf("sluice client check claude: %v\n%s", err, out)
		}
	}
	ce.d.stop()
	out, _ := ce.run(t, claude, "mcp", "list")
	// 2.1.332 prints "! Connected · tools fetch failed — " and the
	// bridge's hint: the server started, sluiced did not answer.
	if l := lineWith(out, "sluice:"); l == "" || strings.Contains(l, "✔ Connected") || !strings.Contains(l, "cannot reach sluiced") {
		t.Errorf("claude mcp list with sluiced down: want sluice's failure hint, not ✔ Connected:\n%s", out)
	} else {
		t.Logf("with sluiced down, claude prints: %s", l)
	}
	out, err := ce.check(t, "claude")
	if err == nil || !strings.Contains(out, "systemctl start sluiced") {
		t.Errorf("sluice client check with sluiced down: %v, want a failure naming `systemctl start sluiced`:\n%s", err, out)
	} else {
		t.Logf("sluice client check with sluiced down:\n%s", out)
	}
}

// TestClientGemini: after `sluice client setup gemini`, `gemini mcp list`
// shows sluice Connected in the (now trusted) project folder.
func TestClientGemini(t *testing.T) {
	gemini := clientBin(t, "gemini", "gemini")
	ce := newClientEnv(t)
	start := ce.setup(t, "gemini")
	out, err := ce.run(t, gemini, "mcp", "list")
	l := lineWith(out, "sluice:")
	if err != nil || !strings.Contains(l, "Connected") {
		t.Fatalf("gemini mcp list: %v\n%s", err, out)
	}
	t.Logf("Gemini CLI 0.61.0: %v from setup to listed: %s", time.Since(start).Round(time.Millisecond), l)
	// Gemini loads its policy files before it asks for credentials, and
	// names a file it rejects (TOML or rule schema): setup's rule loads.
	out, _ = ce.run(t, gemini, "-p", "hi")
	if strings.Contains(out, "Policy file error") || !strings.Contains(out, "Auth method") {
		t.Errorf("gemini -p (no credentials): want only the missing auth, got:\n%s", out)
	}
	if out, err := ce.check(t, "gemini"); err != nil {
		t.Fatalf("sluice client check gemini: %v\n%s", err, out)
	}
}

// TestClientCodex: after `sluice client setup codex`, Codex's app server
// (JSON-RPC over stdio) lists sluice's tools: mcpServerStatus/list.
func TestClientCodex(t *testing.T) {
	codex := clientBin(t, "codex", "codex")
	ce := newClientEnv(t)
	start := ce.setup(t, "codex")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, codex, "app-server")
	cmd.Dir, cmd.Env = ce.proj, ce.env()
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	for _, m := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"sluice-e2e","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"mcpServerStatus/list","params":{}}`,
	} {
		io.WriteString(stdin, m+"\n")
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var msg struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &msg) != nil || msg.ID != 2 {
			continue
		}
		var res struct {
			Data []struct {
				Name  string                     `json:"name"`
				Tools map[string]json.RawMessage `json:"tools"`
			} `json:"data"`
		}
		if msg.Error != nil || json.Unmarshal(msg.Result, &res) != nil {
			t.Fatalf("mcpServerStatus/list: %s %s", msg.Error, msg.Result)
		}
		for _, s := range res.Data {
			if s.Name == "sluice" && s.Tools["read_file"] != nil {
				var names []string
				for n := range s.Tools {
					names = append(names, n)
				}
				t.Logf("Codex CLI 0.171.0: %v from setup to listed: app-server mcpServerStatus/list: sluice with tools %v",
					time.Since(start).Round(time.Millisecond), names)
				if out, err := ce.check(t, "codex"); err != nil {
					t.Fatalf("sluice client check codex: %v\n%s", err, out)
				}
				codexTools(t, ce, codex)
				return
			}
		}
		t.Fatalf("mcpServerStatus/list lists no sluice with read_file: %s", msg.Result)
	}
	t.Fatalf("codex app-server ended without answering: %v\n%s", sc.Err(), stderr.String())
}

// TestClientInspector: the MCP Inspector's CLI, which passes the server no
// environment, calls read_file through `sluice mcp --socket PATH`.
func TestClientInspector(t *testing.T) {
	inspector := clientBin(t, "inspector", "mcp-inspector")
	ce := newClientEnv(t)
	start := time.Now()
	out, err := ce.run(t, inspector, "--cli", filepath.Join(binDir, "sluice"), "mcp", "--socket", ce.d.socket,
		"--method", "tools/call", "--tool-name", "read_file", "--tool-arg", "path=workspace/src/a.py")
	if err != nil || !strings.Contains(out, `"verdict": "allow"`) {
		t.Fatalf("inspector --cli tools/call read_file: %v\n%s", err, out)
	}
	t.Logf("MCP Inspector 2.12.0: %v to a read_file result: %s", time.Since(start).Round(time.Millisecond), lineWith(out, `"verdict"`))
}

// codexTools: `codex debug prompt-input` renders what the model would be
// given, without a model: after setup, Codex's own shell (exec_command,
// write_stdin) and view_image are gone, and sluice's tools are there.
func codexTools(t *testing.T, ce *clientEnv, codex string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, codex, "debug", "prompt-input", "hi")
	cmd.Dir, cmd.Env = ce.proj, ce.env()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("codex debug prompt-input: %v", err)
	}
	prompt := string(out)
	for _, own := range []string{"exec_command", "write_stdin", "view_image"} {
		if strings.Contains(prompt, "### `"+own+"`") {
			t.Errorf("after setup, Codex still offers its own %s", own)
		}
	}
	if !strings.Contains(prompt, "mcp__sluice") {
		t.Errorf("codex debug prompt-input names no mcp__sluice tools")
	}
}
