package mcp_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/mcp"
	"github.com/sluicehq/sluice/sandbox"
)

// TestMCPStdioFastSameAsSDK: over stdio, each tools/call the fast path
// answers (params only a name and arguments) gets the very line the SDK
// writes for the same call (sent with an empty _meta, which the fast path
// leaves to the SDK), but for the call's id: text and spliced outputs,
// HTML and control characters, a blob, a denial, args sluiced refuses, an
// unknown tool, string and integer request ids, and a call cancelled by
// notifications/cancelled (the daemon told by call id: "cancelled by
// agent"). Fails if the fast path answers none of them.
func TestMCPStdioFastSameAsSDK(t *testing.T) {
	fx, m := fixture(t, `,"big_read":{"operation":"read","roots":["workspace/src"]}`)
	big := strings.Repeat(`<a href="x">&amp; "quoted" \ back`+"\u00e9\u2028\t\n", 64)
	if err := os.WriteFile(filepath.Join(fx.Base, "workspace/src/big.html"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startSluiced(t, m)
	c := clientAs(d.socket, agentUID)
	defer c.Close()
	logs := &testutil.LockedBuffer{}
	b := mcp.New(mcp.Options{Socket: d.socket, Client: c, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		err := b.RunStdio(ctx, inR, outW, 0)
		outW.Close()
		ran <- err
	}()
	lines := bufio.NewScanner(outR)
	lines.Buffer(nil, 1<<20)
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() string {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("no response: %v\nbridge: %s", lines.Err(), logs)
		}
		return lines.Text()
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	if r := recv(); !strings.Contains(r, `"serverInfo"`) {
		t.Fatalf("initialize: %s", r)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	callID := regexp.MustCompile(`"call_id":"[^"]*"|sluice://calls/[^/"]*`)
	cases := []struct{ id, tool, args string }{
		{`1`, "read_file", `{"path":"workspace/src/a.py"}`},
		{`"a<b>&c\u00e9"`, "big_read", `{"path":"workspace/src/big.html"}`},
		{`-7`, "read_file", `{"path":"workspace/src/blob.bin"}`},
		{`3`, "read_file", `{"path":"workspace/secret.txt"}`},
		{`4`, "read_file", `{"path":7}`},
		{`5`, "read_file", `null`},
		{`6`, "no_such_tool", `{}`},
		{`"cancel-me"`, "sleeper", `{}`},
	}
	for _, tc := range cases {
		var got [2]string
		for i, meta := range []string{"", `,"_meta":{}`} {
			send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":%q,"arguments":%s%s}}`, tc.id, tc.tool, tc.args, meta))
			if tc.tool == "sleeper" {
				if err := d.running(t, "sleeper"); err != nil {
					t.Fatal(err)
				}
				send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%s,"reason":"test"}}`, tc.id))
			}
			got[i] = callID.ReplaceAllString(recv(), "CALL")
			if tc.tool == "sleeper" {
				if err := testutil.Poll(20*time.Second, func() error {
					if n := sandbox.Containers(d.runDir); n != 0 {
						return fmt.Errorf("%d containers", n)
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got[0] != got[1] {
			t.Errorf("%s %s:\nfast %s\nSDK  %s", tc.tool, tc.args, got[0], got[1])
		}
	}
	var cancelled int
	for _, r := range d.ledger(t) {
		if r["kind"] == "result" && r["tool"] == "sleeper" {
			if r["detail"] != "cancelled by agent" {
				t.Errorf("a cancelled call's result record: %v", r)
			}
			cancelled++
		}
	}
	if cancelled != 2 {
		t.Errorf("%d sleeper results, want 2", cancelled)
	}
	// Every case but the unknown tool's was the fast path's.
	if n := mcp.FastCalls(b); n != int64(len(cases)-1) {
		t.Errorf("the fast path answered %d calls, want %d", n, len(cases)-1)
	}
	inW.Close()
	if err := <-ran; err != nil {
		t.Errorf("bridge: %v", err)
	}
}
