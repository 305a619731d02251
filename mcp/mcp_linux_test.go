package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/daemon"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/mcp"
	"github.com/sluicehq/sluice/sandbox"
)

// The test binary serves the seccomp exporter when started as one; a
// container's init is handed to sluice-init before Go starts (sandbox.MaybeInit).
func init() { sandbox.MaybeInit() }

func TestMain(m *testing.M) { testutil.Main(m) }

const agentUID = 4242

// protocols: the 2025-11-25 handshake today's agents speak, and the SDK's
// latest (2026-07-28, server/discover and subscriptions/listen).
var protocols = []string{"2025-11-25", ""}

// sluiced is a real daemon, in-process, on its own socket.
type sluiced struct {
	socket, stateDir, runDir, manifest string
	stop                               func()
	stopped                            bool
}

func startSluiced(t *testing.T, manifest string, tweak ...func(*daemon.Config)) *sluiced {
	t.Helper()
	dir := t.TempDir()
	s := &sluiced{socket: filepath.Join(dir, "sluice.sock"), stateDir: filepath.Join(dir, "state"),
		runDir: filepath.Join(dir, "run"), manifest: manifest}
	cfg := daemon.Config{Manifest: manifest, Socket: s.socket, StateDir: s.stateDir, RunDir: s.runDir,
		Logger: slog.New(slog.NewJSONHandler(&testutil.LockedBuffer{}, nil)), Helper: testutil.Helper(t)}
	for _, f := range tweak {
		f(&cfg)
	}
	stop := testutil.Start(t, func(ctx context.Context, ready func()) error {
		cfg.Ready = ready
		return daemon.Run(ctx, cfg)
	})
	s.stop = func() {
		s.stopped = true
		stop()
	}
	t.Cleanup(func() {
		s.stop()
		if left := sandbox.Leftovers(s.runDir); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	return s
}

// ledger returns the records of the daemon's ledger.
func (s *sluiced) ledger(t *testing.T) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.stateDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	for _, line := range bytes.Split(b, []byte("\n")) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil {
			recs = append(recs, rec)
		}
	}
	return recs
}

// running waits until a call of tool is decided (its decision record is
// in the ledger, made durable before the command starts) and a container
// runs.
func (s *sluiced) running(t *testing.T, tool string) error {
	t.Helper()
	return testutil.Poll(20*time.Second, func() error {
		decided := slices.ContainsFunc(s.ledger(t), func(r map[string]any) bool { return r["kind"] == "decision" && r["tool"] == tool })
		if !decided || sandbox.Containers(s.runDir) == 0 {
			return fmt.Errorf("%s: decided %t, %d containers", tool, decided, sandbox.Containers(s.runDir))
		}
		return nil
	})
}

// clientAs is a client whose connections carry uid's credentials
// (SO_PEERCRED reports the effective uid at connect; the fs uid stays 0 so
// the socket's mode lets it in).
func clientAs(socket string, uid int) *client.Client {
	return client.NewWithDialer(socket, testutil.DialAs(socket, uid))
}

// session is an MCP client session with a bridge, connected in memory.
type session struct {
	*sdk.ClientSession
	bridge      *mcp.Bridge
	progress    chan *sdk.ProgressNotificationParams
	listChanged chan struct{}
	logs        *testutil.LockedBuffer
}

// connect runs a bridge on c (a client of socket) and connects the SDK's
// client to it over in-memory transports, speaking protocol ("" the
// SDK's latest).
func connect(t *testing.T, socket string, c *client.Client, protocol string, tweak ...func(*mcp.Options)) *session {
	t.Helper()
	return connectOver(t, false, socket, c, protocol, tweak...)
}

// connectOver is connect, over pipes to RunStdio (what `sluice mcp`
// serves on stdin and stdout: its fast path) when stdio is set.
func connectOver(t *testing.T, stdio bool, socket string, c *client.Client, protocol string, tweak ...func(*mcp.Options)) *session {
	t.Helper()
	s := &session{progress: make(chan *sdk.ProgressNotificationParams, 256), listChanged: make(chan struct{}, 16), logs: &testutil.LockedBuffer{}}
	opts := mcp.Options{Socket: socket, Client: c, Logger: slog.New(slog.NewTextHandler(s.logs, nil)),
		RetryMin: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond}
	for _, f := range tweak {
		f(&opts)
	}
	b := mcp.New(opts)
	s.bridge = b
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	var ct sdk.Transport
	if stdio {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		ct = &sdk.IOTransport{Reader: outR, Writer: inW}
		go func() {
			err := b.RunStdio(ctx, inR, outW, 0)
			outW.Close()
			ran <- err
		}()
	} else {
		var st sdk.Transport
		st, ct = sdk.NewInMemoryTransports()
		go func() { ran <- b.Run(ctx, st) }()
	}
	mc := sdk.NewClient(&sdk.Implementation{Name: "sluice-test", Version: "0"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) { s.progress <- r.Params },
		ToolListChangedHandler:      func(context.Context, *sdk.ToolListChangedRequest) { s.listChanged <- struct{}{} },
	})
	cs, err := mc.Connect(ctx, ct, &sdk.ClientSessionOptions{ProtocolVersion: protocol})
	if err != nil {
		cancel()
		t.Fatalf("connect: %v", err)
	}
	s.ClientSession = cs
	t.Cleanup(func() {
		cs.Close()
		// The bridge ends once its client is gone (stdin closed).
		select {
		case err := <-ran:
			if err != nil {
				t.Errorf("bridge: %v\n%s", err, s.logs)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("the bridge did not end after its client closed")
		}
		cancel()
		c.Close()
	})
	return s
}

func (s *session) call(t *testing.T, ctx context.Context, tool string, args any, token any) (*sdk.CallToolResult, error) {
	t.Helper()
	p := &sdk.CallToolParams{Name: tool, Arguments: args}
	if token != nil {
		p.SetProgressToken(token)
	}
	return s.CallTool(ctx, p)
}

func (s *session) mustCall(t *testing.T, tool string, args any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.call(t, ctx, tool, args, nil)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

func structured(t *testing.T, res *sdk.CallToolResult) mcp.Structured {
	t.Helper()
	b, _ := json.Marshal(res.StructuredContent)
	var s mcp.Structured
	if err := json.Unmarshal(b, &s); err != nil || s.CallID == "" {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
	return s
}

func texts(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

const manifestTools = `
  "read_file":{"operation":"read","roots":["workspace/src"],"never":[".env","*.pem","private/**"],"max_bytes":64},
  "list_dir":{"operation":"list","roots":["workspace/src"]},
  "write_file":{"operation":"write","roots":["workspace/src"]},
  "ask_read":{"operation":"read","roots":["workspace/src"],"approval":"human"},
  "run":{"operation":"execute","commands":[["sh","-c","echo one; sleep 0.3; echo two; echo three >&2"]],"mounts":["workspace/src"],"pool":0},
  "sleeper":{"operation":"execute","commands":[["sleep","30"]],"timeout_ms":60000,"pool":0}`

func fixture(t *testing.T, extra string) (*escapetest.Fixture, string) {
	t.Helper()
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	if err := os.Chmod(fx.Base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fx.Base, "workspace/src/blob.bin"), []byte{0xff, 0xfe, 0, 1, 2, 0x80}, 0o644); err != nil {
		t.Fatal(err)
	}
	m := filepath.Join(fx.Base, "manifest.json")
	writeManifest(t, m, extra)
	return fx, m
}

func writeManifest(t *testing.T, path, extra string) {
	t.Helper()
	body := `{"schema_version":1,
	  "principals":{"agent":{"uids":[4242],"tools":["*"]},"ops":{"uids":[0],"approver":true,"tools":[]}},
	  "tools":{` + manifestTools + extra + `}}`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

var approvalRE = regexp.MustCompile(`waiting for approval (\S+)`)

// TestMCPBridge: the SDK's client, through the bridge, against a real
// sluiced, for each protocol version: the tool list with its hints and
// schemas, an allowed read, denials as tool errors, truncation, binary
// output as a blob, execute with progress, a cancel that ends the call in
// the daemon, an approval decided from a second client, and a reload
// that changes the list (list_changed arrives).
func TestMCPBridge(t *testing.T) {
	for _, stdio := range []bool{false, true} {
		for _, proto := range protocols {
			name := proto
			if name == "" {
				name = "latest"
			}
			if stdio {
				name += "/stdio"
			}
			t.Run(name, func(t *testing.T) { testBridge(t, stdio, proto) })
		}
	}
}

func testBridge(t *testing.T, stdio bool, proto string) {
	fx, m := fixture(t, "")
	d := startSluiced(t, m)
	s := connectOver(t, stdio, d.socket, clientAs(d.socket, agentUID), proto)
	ops := clientAs(d.socket, 0)
	defer ops.Close()
	if got := s.InitializeResult(); got.ServerInfo.Name != "sluice" || got.ServerInfo.Version != api.Version ||
		!strings.Contains(got.Instructions, "untrusted data") {
		t.Fatalf("initialize: %+v", got)
	}

	t.Run("list", func(t *testing.T) {
		lt, err := s.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]*sdk.Tool{}
		for _, tl := range lt.Tools {
			byName[tl.Name] = tl
		}
		want := []string{"ask_read", "list_dir", "read_file", "run", "sleeper", "write_file"}
		if got := slices.Sorted(func(yield func(string) bool) {
			for n := range byName {
				if !yield(n) {
					return
				}
			}
		}); !slices.Equal(got, want) {
			t.Fatalf("tools %v, want %v", got, want)
		}
		for name, want := range map[string]struct{ ro, destructive, idem bool }{
			"read_file": {ro: true, idem: true}, "list_dir": {ro: true, idem: true},
			"write_file": {destructive: true}, "run": {},
		} {
			a := byName[name].Annotations
			if a == nil || a.ReadOnlyHint != want.ro || a.IdempotentHint != want.idem || a.OpenWorldHint == nil || *a.OpenWorldHint ||
				(!want.ro && (a.DestructiveHint == nil || *a.DestructiveHint != want.destructive)) {
				t.Errorf("%s annotations: %+v", name, a)
			}
		}
		in, _ := json.Marshal(byName["read_file"].InputSchema)
		out, _ := json.Marshal(byName["read_file"].OutputSchema)
		if !strings.Contains(string(in), `"path"`) || !strings.Contains(string(out), `"call_id"`) || !strings.Contains(string(out), `"exit_code"`) {
			t.Fatalf("schemas: in %s out %s", in, out)
		}
		if byName["read_file"].Description == "" {
			t.Error("read_file has no description")
		}
	})

	t.Run("read", func(t *testing.T) {
		res := s.mustCall(t, "read_file", map[string]any{"path": "workspace/src/a.py"})
		st := structured(t, res)
		if res.IsError || texts(res) != "print('hello')\n" || st.Verdict != api.VerdictAllow || st.Reason != api.ReasonAllowed || !st.OK || st.Bytes != 15 {
			t.Fatalf("read: %+v %q", st, texts(res))
		}
	})

	t.Run("denials", func(t *testing.T) {
		for path, reason := range map[string]api.Reason{
			"workspace/src/.env": api.ReasonNeverListed, "workspace/secret.txt": api.ReasonOutsideRoots,
			"workspace/src/../../secret.txt": api.ReasonOutsideRoots, "workspace/src/rel_out": api.ReasonOutsideRoots,
		} {
			res := s.mustCall(t, "read_file", map[string]any{"path": path})
			st := structured(t, res)
			if !res.IsError || st.Verdict != api.VerdictDeny || st.Reason != reason || !strings.Contains(texts(res), string(reason)) ||
				strings.Contains(texts(res), escapetest.Secret) {
				t.Errorf("%s: %+v %q, want isError, deny %s", path, st, texts(res), reason)
			}
		}
		// Args the daemon cannot decode are a tool error the model can fix.
		res := s.mustCall(t, "read_file", map[string]any{"path": 7})
		if !res.IsError || !strings.Contains(texts(res), "bad_request") {
			t.Errorf("bad args: %q", texts(res))
		}
	})

	t.Run("truncation", func(t *testing.T) {
		res := s.mustCall(t, "read_file", map[string]any{"path": "workspace/src/long.txt"})
		st := structured(t, res)
		if !st.Truncated || st.Bytes != 64 || !strings.Contains(texts(res), "output truncated at 64 bytes") {
			t.Fatalf("truncated read: %+v %q", st, texts(res))
		}
	})

	t.Run("binary", func(t *testing.T) {
		res := s.mustCall(t, "read_file", map[string]any{"path": "workspace/src/blob.bin"})
		var blob *sdk.ResourceContents
		for _, c := range res.Content {
			if er, ok := c.(*sdk.EmbeddedResource); ok {
				blob = er.Resource
			}
		}
		if res.IsError || blob == nil || !bytes.Equal(blob.Blob, []byte{0xff, 0xfe, 0, 1, 2, 0x80}) ||
			blob.URI != "file://"+filepath.Join(fx.Base, "workspace/src/blob.bin") || blob.MIMEType != "application/octet-stream" {
			t.Fatalf("binary read: %+v", res.Content)
		}
	})

	t.Run("write", func(t *testing.T) {
		res := s.mustCall(t, "write_file", map[string]any{"path": "workspace/src/new.txt", "content": "hi\n"})
		st := structured(t, res)
		if res.IsError || !st.OK || len(st.SHA256) < 64 || !strings.Contains(texts(res), st.SHA256) {
			t.Fatalf("write: %+v %q", st, texts(res))
		}
	})

	t.Run("execute with progress", func(t *testing.T) {
		res, err := s.call(t, context.Background(), "run", map[string]any{}, "run-1")
		if err != nil {
			t.Fatal(err)
		}
		st := structured(t, res)
		if res.IsError || !st.OK || st.ExitCode == nil || *st.ExitCode != 0 || !strings.Contains(texts(res), "one\ntwo\n") ||
			!strings.Contains(texts(res), "stderr:\nthree") {
			t.Fatalf("run: %+v %q", st, texts(res))
		}
		// Each chunk of output came as a progress notification, in order.
		var msgs []string
		last := 0.0
		for len(msgs) < 3 {
			select {
			case p := <-s.progress:
				if p.ProgressToken != "run-1" || p.Progress <= last {
					t.Fatalf("progress %+v after %v", p, last)
				}
				last = p.Progress
				msgs = append(msgs, strings.TrimSpace(p.Message))
			case <-time.After(10 * time.Second):
				t.Fatalf("progress: only %v", msgs)
			}
		}
		// stdout in order; stderr's line may come before or after "two".
		if msgs[0] != "one" || !slices.Contains(msgs, "two") || !slices.Contains(msgs, "three") {
			t.Fatalf("progress messages %q", msgs)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := s.call(t, ctx, "sleeper", map[string]any{}, nil)
			done <- err
		}()
		if err := d.running(t, "sleeper"); err != nil {
			t.Fatal(err)
		}
		cancel() // the client sends notifications/cancelled
		if err := <-done; err == nil {
			t.Fatal("a cancelled call returned a result")
		}
		var rec map[string]any
		if err := testutil.Poll(20*time.Second, func() error {
			if n := sandbox.Containers(d.runDir); n != 0 {
				return fmt.Errorf("%d containers", n)
			}
			for _, r := range d.ledger(t) {
				if r["kind"] == "result" && r["tool"] == "sleeper" {
					rec = r
					return nil
				}
			}
			return errors.New("no result record")
		}); err != nil {
			t.Fatalf("%v\nbridge: %s\nledger: %v", err, s.logs, d.ledger(t))
		}
		if rec["reason"] != string(api.ReasonCancelled) || rec["detail"] != "cancelled by agent" {
			t.Fatalf("the cancelled call's result record: %v", rec)
		}
	})

	t.Run("approval", func(t *testing.T) {
		type out struct {
			res *sdk.CallToolResult
			err error
		}
		done := make(chan out, 1)
		go func() {
			res, err := s.call(t, context.Background(), "ask_read", map[string]any{"path": "workspace/src/a.py"}, "ask-1")
			done <- out{res, err}
		}()
		var id string
		for id == "" {
			select {
			case p := <-s.progress:
				if m := approvalRE.FindStringSubmatch(p.Message); m != nil && p.ProgressToken == "ask-1" {
					id = m[1]
				}
			case o := <-done:
				t.Fatalf("ask_read returned before its approval: %+v %v", o.res, o.err)
			case <-time.After(20 * time.Second):
				t.Fatal("no 'waiting for approval' progress")
			}
		}
		if _, err := ops.Decide(context.Background(), id, true, "ok from the test"); err != nil {
			t.Fatalf("approve %s: %v", id, err)
		}
		o := <-done
		if o.err != nil || o.res.IsError || texts(o.res) != "print('hello')\nThe approver's note: ok from the test" ||
			structured(t, o.res).ApprovalNote != "ok from the test" {
			t.Fatalf("approved call: %+v %v", o.res, o.err)
		}
	})

	t.Run("reload changes the list", func(t *testing.T) {
		for len(s.listChanged) > 0 {
			<-s.listChanged
		}
		writeManifest(t, m, `,"read_tests":{"operation":"read","roots":["workspace/tests"]}`)
		if _, err := ops.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-s.listChanged:
		case <-time.After(20 * time.Second):
			t.Fatalf("no tools/list_changed after a reload\n%s", s.logs)
		}
		lt, err := s.ListTools(context.Background(), nil)
		if err != nil || !slices.ContainsFunc(lt.Tools, func(tl *sdk.Tool) bool { return tl.Name == "read_tests" }) {
			t.Fatalf("tools after the reload: %v %v", lt, err)
		}
		res := s.mustCall(t, "read_tests", map[string]any{"path": "workspace/tests/t.py"})
		if res.IsError || texts(res) != "import unittest\n" {
			t.Fatalf("the new tool: %q", texts(res))
		}
	})
}

// TestMCPOpaqueDenial: under deny_detail "opaque" a denial through the
// bridge says only "unavailable".
func TestMCPOpaqueDenial(t *testing.T) {
	fx, m := fixture(t, "")
	raw, _ := os.ReadFile(m)
	os.WriteFile(m, bytes.Replace(raw, []byte(`"schema_version":1,`), []byte(`"schema_version":1,"deny_detail":"opaque",`), 1), 0o644)
	d := startSluiced(t, m)
	s := connect(t, d.socket, clientAs(d.socket, agentUID), "")
	for _, path := range []string{"workspace/src/.env", "workspace/secret.txt"} {
		res := s.mustCall(t, "read_file", map[string]any{"path": path})
		st := structured(t, res)
		if !res.IsError || st.Reason != api.ReasonUnavailable || texts(res) != "sluice denied this call: unavailable" {
			t.Errorf("%s: %+v %q", path, st, texts(res))
		}
	}
	_ = fx
}

// TestMCPDaemonStopped: sluiced stopped mid-call ends the call with a
// result (reason shutdown), and from then on every request answers at
// once with an error that names the socket and what to check; a bridge
// whose sluiced never ran says the same. Nothing hangs.
func TestMCPDaemonStopped(t *testing.T) {
	_, m := fixture(t, "")
	d := startSluiced(t, m, func(c *daemon.Config) { c.ShutdownGrace = 200 * time.Millisecond })
	s := connect(t, d.socket, clientAs(d.socket, agentUID), "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang fails here
	defer cancel()
	type out struct {
		res *sdk.CallToolResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := s.call(t, ctx, "sleeper", map[string]any{}, nil)
		done <- out{res, err}
	}()
	if err := d.running(t, "sleeper"); err != nil {
		t.Fatal(err)
	}
	d.stop()
	o := <-done
	if o.err != nil {
		if !strings.Contains(o.err.Error(), d.socket) {
			t.Fatalf("the call when sluiced stopped: %v", o.err)
		}
	} else if !o.res.IsError || structured(t, o.res).Reason != api.ReasonShutdown {
		t.Fatalf("the call when sluiced stopped: %+v %q", o.res.StructuredContent, texts(o.res))
	}
	wantClear := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), d.socket) || !strings.Contains(err.Error(), "systemctl status sluiced") ||
			!strings.Contains(err.Error(), "group sluice") {
			t.Fatalf("%s after sluiced stopped: %v", what, err)
		}
	}
	_, err := s.call(t, ctx, "read_file", map[string]any{"path": "workspace/src/a.py"}, nil)
	wantClear("tools/call", err)
	_, err = s.ListTools(ctx, nil)
	wantClear("tools/list", err)

	// A bridge whose sluiced is not there at all.
	none := filepath.Join(t.TempDir(), "none.sock")
	s2 := connect(t, none, client.New(none), "2025-11-25")
	_, err = s2.ListTools(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), none) || !strings.Contains(err.Error(), "systemctl status sluiced") {
		t.Fatalf("tools/list without sluiced: %v", err)
	}
}

// TestMCPTask: with --task, every call of the session carries the task
// id, so `sluice tasks cancel ID` ends the session's running command.
func TestMCPTask(t *testing.T) {
	_, m := fixture(t, "")
	d := startSluiced(t, m)
	agent := clientAs(d.socket, agentUID)
	s := connect(t, d.socket, clientAs(d.socket, agentUID), "", func(o *mcp.Options) { o.Task = "session-7" })
	defer agent.Close()
	type out struct {
		res *sdk.CallToolResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := s.call(t, context.Background(), "sleeper", map[string]any{}, nil)
		done <- out{res, err}
	}()
	if err := d.running(t, "sleeper"); err != nil {
		t.Fatal(err)
	}
	if tc, err := agent.CancelTask(context.Background(), "session-7"); err != nil || tc.Ended != 1 {
		t.Fatalf("cancel the session's task: %+v %v", tc, err)
	}
	o := <-done
	if o.err != nil || !o.res.IsError || structured(t, o.res).Reason != api.ReasonTaskCancelled {
		t.Fatalf("the session's call after its task was cancelled: %+v %v", o.res, o.err)
	}
}
