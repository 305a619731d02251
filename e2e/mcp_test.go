//go:build linux

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
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
	stderr := &syncBuffer{}
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
