//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
)

// The test binary serves the seccomp exporter when started as one; a
// container's init is handed to sluice-init before Go starts (sandbox.MaybeInit).
func init() { sandbox.MaybeInit() }

func TestMain(m *testing.M) { testutil.Main(m) }

type harness struct {
	t        *testing.T
	socket   string
	stateDir string
	c        *client.Client
	logs     *bytes.Buffer
}

// startB starts a daemon for a benchmark, with its ledger where
// $SLUICE_BENCH_STATE says (default: the temp dir).
func startB(b *testing.B, manifest string) *client.Client {
	dir := b.TempDir()
	if s := os.Getenv("SLUICE_BENCH_STATE"); s != "" {
		dir = s
	}
	cfg := Config{Manifest: manifest, Socket: filepath.Join(dir, "b.sock"), StateDir: filepath.Join(dir, "state"),
		RunDir: filepath.Join(dir, "run"), Helper: testutil.Helper(b),
		Logger: slog.New(slog.NewJSONHandler(benchLog(), nil))}
	stop := launch(b, cfg)
	c := client.New(cfg.Socket)
	b.Cleanup(func() { c.Close(); stop(); os.RemoveAll(filepath.Join(dir, "state")) })
	return c
}

// launch runs a daemon with cfg until the returned stop is called, and
// returns once it is listening.
func launch(tb testing.TB, cfg Config) (stop func()) {
	tb.Helper()
	return testutil.Start(tb, func(ctx context.Context, ready func()) error {
		cfg.Ready = ready
		return Run(ctx, cfg)
	})
}

// runRefused runs a daemon on manifest and returns the error it stopped
// with before it was ready; a daemon that becomes ready is stopped, and
// runRefused returns nil.
func runRefused(tb testing.TB, manifest string) error {
	tb.Helper()
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Manifest: manifest, Socket: filepath.Join(tb.TempDir(), "s.sock"), StateDir: tb.TempDir(),
			RunDir: tb.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Helper: testutil.Helper(tb),
			Ready: func() { close(ready) }})
	}()
	select {
	case err := <-done:
		return err
	case <-ready:
		cancel()
		<-done
		return nil
	}
}

// start runs a daemon in-process on a fresh socket and state dir and stops
// it when the test ends.
func start(t *testing.T, manifest string, mode securefs.Mode, tweak ...func(*Config)) *harness {
	t.Helper()
	dir := t.TempDir()
	logs := &testutil.LockedBuffer{}
	cfg := Config{
		Manifest: manifest, Socket: filepath.Join(dir, "sluice.sock"), StateDir: filepath.Join(dir, "state"),
		Logger: slog.New(slog.NewJSONHandler(logs, nil)), ResolveMode: mode,
		RunDir: filepath.Join(dir, "run"), Helper: testutil.Helper(t),
	}
	for _, f := range tweak {
		f(&cfg)
	}
	stop := launch(t, cfg)
	h := &harness{t: t, socket: cfg.Socket, stateDir: cfg.StateDir, c: client.New(cfg.Socket), logs: &logs.Buffer}
	t.Cleanup(func() {
		h.c.Close()
		stop()
	})
	return h
}

func (h *harness) raw(body string) (int, []byte) {
	h.t.Helper()
	code, b, err := h.c.CallRaw(context.Background(), []byte(body))
	if err != nil {
		h.t.Fatal(err)
	}
	return code, b
}

func (h *harness) call(tool string, args any) (*api.CallResult, []byte) {
	h.t.Helper()
	a, _ := json.Marshal(args)
	body, _ := json.Marshal(api.CallRequest{Tool: tool, Args: a})
	code, b := h.raw(string(body))
	if code != 200 {
		h.t.Fatalf("status %d: %s", code, b)
	}
	var res api.CallResult
	if err := json.Unmarshal(b, &res); err != nil {
		h.t.Fatal(err)
	}
	return &res, b
}

func (h *harness) ledger() []byte {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.stateDir, "audit.jsonl"))
	if err != nil {
		h.t.Fatal(err)
	}
	n, err := audit.Verify(bytes.NewReader(b))
	if err != nil || n == 0 {
		h.t.Fatalf("audit verify: %d records, %v", n, err)
	}
	return b
}

// TestEscapeTable runs the one escape table over the socket, with the
// openat2 resolver and with the forced os.Root fallback.
func TestEscapeTable(t *testing.T) {
	testutil.RequireRoot(t)
	for _, mode := range []securefs.Mode{securefs.ModeOpenat2, securefs.ModeFallback} {
		t.Run(mode.String(), func(t *testing.T) {
			fx := escapetest.Build(t)
			h := start(t, fx.Manifest, mode)
			for _, c := range escapetest.Cases {
				res, body := h.call(escapetest.ToolFor(c.Op), map[string]string{"path": fx.PathFor(c)})
				checkCase(t, fx, c, res, body)
			}
			if l := h.ledger(); bytes.Contains(l, []byte(escapetest.Secret)) {
				t.Fatal("a secret reached the audit ledger")
			}
		})
	}
}

func checkCase(t *testing.T, fx *escapetest.Fixture, c escapetest.Case, res *api.CallResult, body []byte) {
	t.Helper()
	if bytes.Contains(body, []byte(escapetest.Secret)) {
		t.Errorf("%s: ESCAPE: response carries a secret: %s", c.Name, body)
	}
	if res.Reason != c.Want {
		t.Errorf("%s: reason %q, want %q (%s)", c.Name, res.Reason, c.Want, body)
		return
	}
	if wantAllow := c.Want == "allowed"; (res.Verdict == "allow") != wantAllow || res.OK != wantAllow {
		t.Errorf("%s: verdict %s ok %t", c.Name, res.Verdict, res.OK)
	}
	if err := fx.CheckResolved(c, res.Resource); err != nil {
		t.Errorf("%s: %v", c.Name, err)
	}
	if res.Verdict == "deny" && res.Output != nil {
		t.Errorf("%s: a denial carries output", c.Name)
	}
	if c.Truncated {
		if !res.Truncated || res.Bytes > escapetest.MaxBytes || res.Bytes < escapetest.MaxBytes-3 {
			t.Errorf("%s: truncated %t bytes %d, want cut at %d", c.Name, res.Truncated, res.Bytes, escapetest.MaxBytes)
		}
		if res.Output == nil || !utf8.ValidString(*res.Output) {
			t.Errorf("%s: cut text is not returned as text", c.Name)
		}
	} else if res.Truncated {
		t.Errorf("%s: unexpectedly truncated", c.Name)
	}
	if c.Contains != "" && (res.Output == nil || !strings.Contains(*res.Output, c.Contains)) {
		t.Errorf("%s: output lacks %q", c.Name, c.Contains)
	}
	if c.Op == escapetest.List && res.Output != nil {
		for _, hidden := range []string{`".env"`, `"id.pem"`, `"private"`} {
			if strings.Contains(*res.Output, hidden) {
				t.Errorf("%s: listing shows never-listed %s", c.Name, hidden)
			}
		}
	}
}

func TestProtocol(t *testing.T) {
	fx := escapetest.Build(t)
	h := start(t, fx.Manifest, securefs.ModeAuto)
	big := `{"tool":"read_file","args":{"path":"` + strings.Repeat("a", 2<<20) + `"}}`
	for _, tc := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"malformed", `{"tool":`, 400, "malformed"},
		{"not an object", `[1,2]`, 400, "expected"},
		{"null", `null`, 400, "tool: required"},
		{"empty", ``, 400, "malformed"},
		{"claims identity", `{"tool":"read_file","args":{"path":"workspace/src/a.py"},"principal":"root"}`, 400, "unknown field"},
		{"key case", `{"TOOL":"read_file","args":{"path":"workspace/src/a.py"}}`, 400, "TOOL: unknown field"},
		{"args key case", `{"tool":"read_file","args":{"PATH":"workspace/src/a.py"}}`, 400, "args.PATH: unknown field"},
		{"duplicate tool", `{"tool":"list_dir","tool":"read_file","args":{"path":"workspace/src/a.py"}}`, 400, "tool: key given twice"},
		{"duplicate path", `{"tool":"read_file","args":{"path":"workspace/src/a.py","path":"workspace/src/.env"}}`, 400, "args.path: key given twice"},
		{"tool wrong type", `{"tool":5}`, 400, "expected string"},
		{"no tool", `{"args":{}}`, 400, "tool: required"},
		{"path wrong type", `{"tool":"read_file","args":{"path":5}}`, 400, "args.path"},
		{"path array", `{"tool":"read_file","args":{"path":["a"]}}`, 400, "args.path"},
		{"args unknown field", `{"tool":"read_file","args":{"path":"a","mode":"w"}}`, 400, "args: unknown field"},
		{"args not object", `{"tool":"read_file","args":"workspace/src/a.py"}`, 400, "args"},
		{"trailing", `{"tool":"read_file","args":{"path":"a"}} {"x":1}`, 400, "trailing"},
		{"stream wrong type", `{"tool":"read_file","stream":"yes"}`, 400, "stream"},
		{"task control chars", `{"tool":"read_file","task":"a\u0001"}`, 400, "task"},
		{"too large", big, 413, "limit"},
		{"missing path", `{"tool":"read_file","args":{}}`, 200, `"reason":"invalid_args"`},
		{"null args", `{"tool":"read_file","args":null}`, 200, `"reason":"invalid_args"`},
		{"unknown tool", `{"tool":"rm_rf","args":{"path":"/"}}`, 200, `"reason":"unknown_tool"`},
		{"NUL in path", `{"tool":"read_file","args":{"path":"a\u0000b"}}`, 200, `"reason":"invalid_path"`},
	} {
		code, body := h.raw(tc.body)
		if code != tc.code || !bytes.Contains(body, []byte(tc.want)) {
			t.Errorf("%s: %d %s; want %d containing %q", tc.name, code, body, tc.code, tc.want)
		}
		if code != 200 {
			var eb api.ErrorBody
			if json.Unmarshal(body, &eb) != nil || eb.Error.Code == "" {
				t.Errorf("%s: error body is not JSON: %s", tc.name, body)
			}
		}
	}
	// 404 and 405 in JSON, over a raw HTTP client.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.socket)
	}}}
	defer hc.CloseIdleConnections()
	for _, tc := range []struct {
		method, path string
		code         int
	}{{"GET", "/v1/calls", 405}, {"DELETE", "/v1/health", 405}, {"GET", "/v1/nope", 404}, {"GET", "/", 404}} {
		req, _ := http.NewRequest(tc.method, "http://x"+tc.path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || resp.Header.Get("Content-Type") != "application/json" || !json.Valid(b) {
			t.Errorf("%s %s: %d %q %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	}
	// 1000 bad requests in a row, then a good one.
	for i := range 1000 {
		bodies := []string{`{`, `{"tool":1}`, `{"x":"y"}`, "\x00\xff", `{"tool":"read_file","args":{"path":{}}}`}
		if code, _ := h.raw(bodies[i%len(bodies)]); code != 400 {
			t.Fatalf("bad request %d: %d", i, code)
		}
	}
	res, _ := h.call("read_file", map[string]string{"path": "workspace/src/a.py"})
	if !res.OK {
		t.Fatalf("good call after bad ones: %+v", res)
	}
}

// TestSlowClient: a client dribbling its request is cut off at the read
// timeout, and others are served meanwhile.
func TestSlowClient(t *testing.T) {
	fx := escapetest.Build(t)
	h := start(t, fx.Manifest, securefs.ModeAuto, func(c *Config) { c.ReadTimeout = time.Second })
	conn, err := net.Dial("unix", h.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	closed := make(chan time.Duration, 1)
	begin := time.Now()
	go func() {
		req := "POST /v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"tool\":"
		for i := 0; i < len(req); i++ {
			if _, err := conn.Write([]byte{req[i]}); err != nil {
				break
			}
			time.Sleep(100 * time.Millisecond) // the slow client's dribble: the attack, not a wait
		}
		io.Copy(io.Discard, conn)
		closed <- time.Since(begin)
	}()
	// Good clients are served while the slow one dribbles, until it is cut.
	served := 0
	var cut time.Duration
	for cut == 0 {
		res, _ := h.call("read_file", map[string]string{"path": "workspace/src/a.py"})
		if !res.OK {
			t.Fatal("a good client was not served while a slow one dribbled")
		}
		served++
		select {
		case cut = <-closed:
		case <-time.After(20 * time.Millisecond): // pacing the good client
		}
		if time.Since(begin) > 5*time.Second {
			t.Fatalf("slow client still connected after %v with a 1 s read timeout", time.Since(begin))
		}
	}
	t.Logf("slow client cut off after %v; %d good calls served meanwhile", cut, served)
	// The header alone takes 6 s to dribble: the 1 s timeout cut it, not
	// the end of its bytes, and not before the timeout.
	if cut < 900*time.Millisecond || cut > 3*time.Second {
		t.Fatalf("slow client cut off after %v; the read timeout is 1 s", cut)
	}
	if served < 5 {
		t.Fatalf("only %d good calls were served while the slow client dribbled", served)
	}
}

// TestAuditUnavailable: with the ledger's filesystem full, calls are
// denied audit_unavailable and nothing is read; with space back, they run.
func TestAuditUnavailable(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	state := t.TempDir()
	testutil.MountTmpfs(t, state, "64k")
	h := start(t, fx.Manifest, securefs.ModeAuto, func(c *Config) { c.StateDir = state })
	res, _ := h.call("read_file", map[string]string{"path": "workspace/src/a.py"})
	if !res.OK {
		t.Fatal(res.Reason)
	}
	filler := filepath.Join(state, "filler")
	// dd stops, failing, once the filesystem is full: that is the point,
	// but it must be why it stopped.
	if out, err := exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=4k").CombinedOutput(); !bytes.Contains(out, []byte("No space left")) {
		t.Fatalf("dd did not fill the filesystem: %v %s", err, out)
	}
	// The ledger's last page may still have room for a record or two.
	drained := false
	for range 20 {
		if res, _ := h.call("read_file", map[string]string{"path": "workspace/src/a.py"}); res.Reason == api.ReasonAuditUnavailable {
			drained = true
			break
		}
	}
	if !drained {
		t.Fatal("calls kept succeeding on a full filesystem")
	}
	for _, stream := range []bool{false, true} {
		for range 5 {
			var res *api.CallResult
			var body []byte
			if stream {
				var err error
				var buf bytes.Buffer
				res, err = h.c.Stream(context.Background(), api.CallRequest{Tool: "read_file", Args: json.RawMessage(`{"path":"workspace/src/a.py"}`)},
					func(ev api.Event) error { buf.Write(ev.Raw); return nil })
				if err != nil {
					t.Fatal(err)
				}
				body = buf.Bytes()
			} else {
				res, body = h.call("read_file", map[string]string{"path": "workspace/src/a.py"})
			}
			if res.Reason != api.ReasonAuditUnavailable || res.OK || bytes.Contains(body, []byte("hello")) {
				t.Fatalf("stream=%t: full ledger, call not failed closed: %s", stream, body)
			}
		}
	}
	testutil.Must(t, os.Remove(filler))
	res, _ = h.call("read_file", map[string]string{"path": "workspace/src/a.py"})
	if !res.OK {
		t.Fatalf("after space freed: %s", res.Reason)
	}
	h.ledger()
}

func TestStream(t *testing.T) {
	fx := escapetest.Build(t)
	h := start(t, fx.Manifest, securefs.ModeAuto)
	for _, tc := range []struct {
		path   string
		events string
		reason api.Reason
	}{
		{"workspace/src/a.py", "decision output result", "allowed"},
		{"workspace/src/../secret.txt", "decision result", "outside_roots"},
	} {
		var kinds []string
		var out strings.Builder
		res, err := h.c.Stream(context.Background(), api.CallRequest{Tool: "read_file", Args: json.RawMessage(`{"path":"` + tc.path + `"}`)},
			func(ev api.Event) error {
				kinds = append(kinds, ev.Event)
				out.WriteString(ev.Data)
				if bytes.Contains(ev.Raw, []byte(`"output":`)) {
					t.Errorf("stream event carries output field: %s", ev.Raw)
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(kinds, " ") != tc.events || res.Reason != tc.reason {
			t.Errorf("%s: events %v reason %s", tc.path, kinds, res.Reason)
		}
		if tc.reason == "allowed" && (out.String() != "print('hello')\n" || res.Bytes != int64(out.Len())) {
			t.Errorf("streamed output %q bytes %d", out.String(), res.Bytes)
		}
	}
}

func writeManifest(t testing.TB, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrincipals(t *testing.T) {
	fx := escapetest.Build(t)
	uid := os.Getuid()
	m := writeManifest(t, fx.Base, fmt.Sprintf(`{"schema_version":1,
	  "principals":{"agent":{"uids":[%d],"tools":["read_file"]}},
	  "tools":{"read_file":{"operation":"read","roots":["workspace/src"]},
	           "list_dir":{"operation":"list","roots":["workspace/src"]}}}`, uid))
	h := start(t, m, securefs.ModeAuto)
	tools, err := h.c.Tools(context.Background())
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "read_file" {
		t.Fatalf("tools: %+v %v", tools, err)
	}
	var schema map[string]any
	if json.Unmarshal(tools.Tools[0].ArgsSchema, &schema) != nil || schema["type"] != "object" {
		t.Fatalf("schema: %s", tools.Tools[0].ArgsSchema)
	}
	if res, _ := h.call("list_dir", map[string]string{"path": "workspace/src"}); res.Reason != api.ReasonPrincipalNotAllowed {
		t.Fatalf("list_dir: %s", res.Reason)
	}
	if res, _ := h.call("read_file", map[string]string{"path": "workspace/src/a.py"}); !res.OK {
		t.Fatalf("read_file: %s", res.Reason)
	}
	if _, err := h.c.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a non-approver reloaded: %v", err)
	}
	b := h.ledger()
	if !bytes.Contains(b, []byte(fmt.Sprintf(`"principal":{%s"gid":%d,"name":"agent","pid":%d,"uid":%d}`, ownCgroupField(t), os.Getgid(), os.Getpid(), uid))) {
		t.Fatal("ledger lacks the kernel-attested principal")
	}
}

func TestUnmappedPeer(t *testing.T) {
	fx := escapetest.Build(t)
	m := writeManifest(t, fx.Base, `{"schema_version":1,
	  "principals":{"other":{"uids":[4242],"tools":["*"]}},
	  "tools":{"read_file":{"operation":"read","roots":["workspace/src"]}}}`)
	h := start(t, m, securefs.ModeAuto)
	tools, err := h.c.Tools(context.Background())
	if err != nil || len(tools.Tools) != 0 {
		t.Fatalf("unmapped peer sees tools: %+v %v", tools, err)
	}
	if res, _ := h.call("read_file", map[string]string{"path": "workspace/src/a.py"}); res.Reason != api.ReasonPrincipalNotAllowed {
		t.Fatal(res.Reason)
	}
}

func TestOpaqueDenials(t *testing.T) {
	fx := escapetest.Build(t)
	m := writeManifest(t, fx.Base, `{"schema_version":1,"deny_detail":"opaque",
	  "tools":{"read_file":{"operation":"read","roots":["workspace/src"],"never":[".env"]}}}`)
	h := start(t, m, securefs.ModeAuto)
	for _, p := range []string{"workspace/src/.env", "workspace/src/missing", "workspace/secret.txt"} {
		_, body := h.call("read_file", map[string]string{"path": p})
		var fields map[string]any
		testutil.Must(t, json.Unmarshal(body, &fields))
		if len(fields) != 3 || fields["reason"] != "unavailable" || fields["verdict"] != "deny" || fields["call_id"] == nil {
			t.Errorf("%s: opaque denial shows %s", p, body)
		}
	}
	if res, _ := h.call("read_file", map[string]string{"path": "workspace/src/a.py"}); !res.OK || res.Reason != "allowed" {
		t.Fatal("allowed call under opaque")
	}
	if !bytes.Contains(h.ledger(), []byte(`"reason":"never_listed"`)) {
		t.Fatal("the ledger must keep the real reason")
	}
}

func TestReloadAndMissingRoot(t *testing.T) {
	fx := escapetest.Build(t)
	m := writeManifest(t, fx.Base, `{"schema_version":1,
	  "tools":{"read_file":{"operation":"read","roots":["workspace/src","workspace/later"]}}}`)
	h := start(t, m, securefs.ModeAuto)
	ctx := context.Background()
	if res, _ := h.call("read_file", map[string]string{"path": "workspace/later/x"}); res.Reason != api.ReasonNotFound {
		t.Fatalf("missing root: %s", res.Reason)
	}
	before, _ := h.c.Health(ctx)
	// An invalid manifest is refused; the old one stays.
	writeManifest(t, fx.Base, `{"schema_version":1,"tools":{"read_file":{"operation":"read","roots":["../x"]}}}`)
	if _, err := h.c.Reload(ctx); err == nil || !strings.Contains(err.Error(), "roots[0]") {
		t.Fatalf("bad manifest reload: %v", err)
	}
	if now, _ := h.c.Health(ctx); now.PolicyVersion != before.PolicyVersion {
		t.Fatal("a refused reload changed the policy")
	}
	if res, _ := h.call("read_file", map[string]string{"path": "workspace/src/a.py"}); !res.OK {
		t.Fatal("old policy not in force after a refused reload")
	}
	// A valid one, with the root now present, takes effect.
	testutil.Must(t, os.MkdirAll(filepath.Join(fx.Base, "workspace/later"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(fx.Base, "workspace/later/x"), []byte("later\n"), 0o644))
	writeManifest(t, fx.Base, `{"schema_version":1,
	  "tools":{"read_file":{"operation":"read","roots":["workspace/later"]}}}`)
	after, err := h.c.Reload(ctx)
	if err != nil || after.PolicyVersion == before.PolicyVersion {
		t.Fatalf("reload: %v", err)
	}
	if res, _ := h.call("read_file", map[string]string{"path": "workspace/later/x"}); !res.OK {
		t.Fatalf("after reload: %s", res.Reason)
	}
	if res, _ := h.call("read_file", map[string]string{"path": "workspace/src/a.py"}); res.Reason != api.ReasonOutsideRoots {
		t.Fatalf("old root still allowed: %s", res.Reason)
	}
	if n := bytes.Count(h.ledger(), []byte(`"kind":"policy_loaded"`)); n != 2 {
		t.Fatalf("%d policy_loaded records, want 2", n)
	}
}

func TestStaleSocket(t *testing.T) {
	fx := escapetest.Build(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	// A socket file left behind by a dead daemon.
	ln, _ := net.Listen("unix", sock)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	h := start(t, fx.Manifest, securefs.ModeAuto, func(c *Config) { c.Socket = sock })
	if _, err := h.c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(sock)
	if fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v", fi.Mode().Perm())
	}
	// A second daemon on a live socket refuses to start.
	err := Run(context.Background(), Config{Manifest: fx.Manifest, Socket: sock, StateDir: t.TempDir(), RunDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "another daemon") {
		t.Fatalf("second daemon: %v", err)
	}
	// A regular file at the socket path is never removed.
	plain := filepath.Join(dir, "plain")
	testutil.Must(t, os.WriteFile(plain, []byte("x"), 0o644))
	err = Run(context.Background(), Config{Manifest: fx.Manifest, Socket: plain, StateDir: t.TempDir(), RunDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("plain file at socket path: %v", err)
	}
}

// FuzzCallBody: no request body makes the parser panic, and whatever it
// accepts names a tool.
func FuzzCallBody(f *testing.F) {
	fx := escapetest.Build(f)
	p, err := loadPolicy(fx.Manifest, securefs.ModeAuto, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		f.Fatal(err)
	}
	defer p.close()
	for _, s := range []string{`{"tool":"read_file","args":{"path":"a"}}`, `{"tool":"list_dir","args":{},"task":"t","stream":true}`,
		`{"tool":"x","args":[1]}`, `{"tool":"read_file","args":{"path":null}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := decodeCall(p.m, body)
		if err != nil {
			return
		}
		if c.req.Tool == "" || (c.tool != nil && c.argsRecord == nil) {
			t.Fatalf("accepted %q without a tool or args record", body)
		}
		if len(c.argsRecord) > authz.MaxArgsRecord+200 {
			t.Fatalf("args record of %d bytes", len(c.argsRecord))
		}
	})
}

func benchLog() io.Writer {
	if os.Getenv("SLUICE_BENCH_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}

// TestTOMLManifest: sluiced loads a manifest by its extension; a .toml
// one serves as its JSON twin would.
func TestTOMLManifest(t *testing.T) {
	fx := escapetest.Build(t)
	p := filepath.Join(fx.Base, "manifest.toml")
	testutil.Must(t, os.WriteFile(p, []byte("schema_version = 1\n[tools.read_file]\noperation = 'read'\nroots = ['workspace/src']\n"), 0o644))
	h := start(t, p, securefs.ModeAuto)
	res, body := h.call("read_file", map[string]any{"path": "workspace/src/a.py"})
	if res.Reason != api.ReasonAllowed || !strings.Contains(*res.Output, "hello") {
		t.Errorf("read through a TOML manifest: %s", body)
	}
}

// TestTOMLCaseVariantRefused: a TOML manifest with a key spelled other
// than as documented is refused over the whole load path: sluiced does
// not start on one, and a reload to one keeps the policy in force. The
// old decoder matched keys ignoring case, so `NEVER = []` after
// `never = ['.env']` let an agent read .env (docs/security.md, "The third
// review").
func TestTOMLCaseVariantRefused(t *testing.T) {
	fx := escapetest.Build(t)
	testutil.Must(t, os.WriteFile(filepath.Join(fx.Base, "workspace/src/.env"), []byte("KEY=secret\n"), 0o600))
	p := filepath.Join(fx.Base, "manifest.toml")
	const good = "schema_version = 1\n[tools.read_file]\noperation = 'read'\nroots = ['workspace/src']\nnever = ['.env']\n"
	testutil.Must(t, os.WriteFile(p, []byte(good+"NEVER = []\n"), 0o644))
	err := runRefused(t, p)
	if err == nil || !strings.Contains(err.Error(), "manifest.toml:6: tools.read_file.NEVER: unknown key") {
		t.Fatalf("sluiced on a manifest with NEVER after never: %v, want refused naming the key and line", err)
	}
	testutil.Must(t, os.WriteFile(p, []byte(good), 0o644))
	h := start(t, p, securefs.ModeAuto)
	ctx := context.Background()
	before, err := h.c.Health(ctx)
	testutil.Must(t, err)
	if res, _ := h.call("read_file", map[string]string{"path": "workspace/src/.env"}); res.Reason != api.ReasonNeverListed {
		t.Fatalf(".env under never: %s", res.Reason)
	}
	testutil.Must(t, os.WriteFile(p, []byte(good+"NEVER = []\n"), 0o644))
	if _, err := h.c.Reload(ctx); err == nil || !strings.Contains(err.Error(), "tools.read_file.NEVER") {
		t.Fatalf("reload to NEVER = []: %v, want refused", err)
	}
	if now, _ := h.c.Health(ctx); now.PolicyVersion != before.PolicyVersion {
		t.Fatal("a refused reload changed the policy")
	}
	if res, _ := h.call("read_file", map[string]string{"path": "workspace/src/.env"}); res.Reason != api.ReasonNeverListed {
		t.Fatalf(".env after a refused reload: %s", res.Reason)
	}
}
