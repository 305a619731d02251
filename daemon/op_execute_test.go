//go:build linux

package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
)

// viewsUIDs keeps these tests' containers apart from other daemons'.
var viewsUIDs = sandbox.IDRange{First: 0x7F020000, Last: 0x7F0200FF}

const viewContent = "VIEW-CONTENT-5e1d"

// viewsFixture: the escape fixture (its base 0700, as a workspace under
// a private home is) plus workspace/src/note.txt, and a manifest with
// read_file and the execute tools given (name → manifest entry body
// after operation/mounts/cwd).
func viewsFixture(t *testing.T, tools map[string]string) (*escapetest.Fixture, string) {
	t.Helper()
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	if err := os.WriteFile(filepath.Join(fx.Base, "workspace/src/note.txt"), []byte(viewContent+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(`{"schema_version":1,"tools":{"read_file":{"operation":"read","roots":["workspace/src"]}`)
	for name, extra := range tools {
		fmt.Fprintf(&b, `,%q:{"operation":"execute","mounts":["workspace/src"],"cwd":"workspace/src","never":[".env","*.pem"],%s}`, name, extra)
	}
	b.WriteString(`}}`)
	return fx, writeManifest(t, fx.Base, b.String())
}

// openRunDir is a run dir whose parents every user may traverse, so
// only the run dir's own mode keeps them out.
func openRunDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		testutil.Must(t, os.Chmod(d, 0o755))
	}
	return filepath.Join(dir, "run")
}

// viewAsNobody runs argv as uid/gid 65534 (no container, no principal) with
// extra as fds 3…, and returns its combined output.
func viewAsNobody(t *testing.T, extra []*os.File, argv ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	cmd.ExtraFiles = extra
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func callOutput(res *api.CallResult) string {
	if res.Output == nil {
		return res.Stderr
	}
	return *res.Output + res.Stderr
}

// TestViewServesOnlyItsContainers (review class 4): a local user that is
// no container reads nothing through a live view, neither by its path in
// the run dir nor through an fd of the view's root handed to it; the
// tool's own container still reads through it.
func TestViewServesOnlyItsContainers(t *testing.T) {
	_, m := viewsFixture(t, map[string]string{"cat": `"commands":[["cat","note.txt"]],"pool":1`})
	runDir := openRunDir(t)
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.RunDir = runDir; c.UIDRange = viewsUIDs })
	res, body := h.call("cat", map[string]any{})
	if res.Reason != api.ReasonAllowed || !strings.Contains(callOutput(res), viewContent) {
		t.Fatalf("the tool's container does not read through its view: %s", body)
	}
	views, _ := filepath.Glob(filepath.Join(runDir, "rootfs", "v*"))
	if len(views) != 1 {
		t.Fatalf("views in the run dir: %v", views)
	}
	file := filepath.Join(views[0], "0", "note.txt")
	if out, err := viewAsNobody(t, nil, "cat", file); err == nil || strings.Contains(out, viewContent) {
		t.Errorf("uid 65534 read %s: %q", file, out)
	}
	if out, err := viewAsNobody(t, nil, "stat", filepath.Join(runDir, "rootfs")); err == nil {
		t.Errorf("uid 65534 traversed the run dir: %q", out)
	}
	// Past the run dir: an fd of the view's root, as a leaked or passed
	// one would be. The view itself must refuse.
	root, err := os.OpenFile(views[0], unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	out, err := viewAsNobody(t, []*os.File{root}, "cat", "/proc/self/fd/3/0/note.txt")
	if err == nil || strings.Contains(out, viewContent) || !strings.Contains(out, "Permission denied") {
		t.Errorf("uid 65534 through an fd of the view: %v %q, want Permission denied", err, out)
	}
	out, err = viewAsNobody(t, []*os.File{root}, "ls", "/proc/self/fd/3/0")
	if err == nil || strings.Contains(out, "note.txt") {
		t.Errorf("uid 65534 listed the view: %v %q", err, out)
	}
}

// holdScript: kids processes each open note.txt until refused and keep
// what they got; the parent prints "TOTAL n ERRNOS" and waits to be
// killed.
func holdScript(kids int) string {
	return fmt.Sprintf(`
import os, sys, errno, time
rs = []
for k in range(%d):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        fds, err = [], ""
        while True:
            try:
                fds.append(os.open("note.txt", os.O_RDONLY))
            except OSError as e:
                err = errno.errorcode.get(e.errno, str(e.errno))
                break
        os.write(w, ("%%d %%s\n" %% (len(fds), err)).encode())
        time.sleep(600)
        os._exit(0)
    os.close(w)
    rs.append(r)
total, errs = 0, set()
for r in rs:
    n, e = os.read(r, 100).decode().split()
    total += int(n)
    errs.add(e)
print("TOTAL", total, ",".join(sorted(errs)), flush=True)
time.sleep(600)
`, kids)
}

// holdOpen starts tool (running holdScript) streamed and returns how
// many files its container holds open and why its processes stopped,
// once they all have; cancel ends the call.
func holdOpen(t *testing.T, h *harness, tool string) (total int, errs string, cancel func()) {
	t.Helper()
	ctx, cancelCtx := context.WithCancel(context.Background())
	s := startStream(h.c, ctx, api.CallRequest{Tool: tool, Args: json.RawMessage(`{}`)})
	cancel = func() {
		cancelCtx()
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Error("the held call did not end within 30 s of its cancel")
		}
	}
	var out string
	for !strings.Contains(out, "\n") {
		ev := s.next(t, "the TOTAL line")
		switch ev.Event {
		case "output":
			out += ev.Data
		case "result":
			cancel()
			t.Fatalf("the call ended before printing its total: %s %q\n%s", ev.Reason, out, lastLines(h.logs.String(), 5))
		}
	}
	if _, err := fmt.Sscanf(out, "TOTAL %d %s", &total, &errs); err != nil {
		cancel()
		t.Fatalf("output %q: %v", out, err)
	}
	return total, errs, cancel
}

// TestViewOpenFilesCapped (class 3): three processes of one container
// opening files until refused hold max_open_files (default 256) between
// them, refused
// with EMFILE; the daemon's fds grow by about that, not by thousands; a
// read_file meanwhile is served; and when the container is gone its fds
// are back.
func TestViewOpenFilesCapped(t *testing.T) {
	_, m := viewsFixture(t, map[string]string{
		"hold": `"commands":[["python3","-c",` + mustString(holdScript(3)) + `]],"pool":0,"timeout_ms":60000`,
	})
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.UIDRange = viewsUIDs })
	before := countFDs(t)
	total, errs, cancel := holdOpen(t, h, "hold")
	during := countFDs(t)
	if total != 256 || errs != "EMFILE" {
		t.Errorf("the container holds %d files open through its view (refused with %s), want 256 (max_open_files), EMFILE", total, errs)
	}
	if during-before > 256+40 {
		t.Errorf("the daemon's fds went from %d to %d while a container capped at 256 held its files", before, during)
	}
	res, body := h.call("read_file", map[string]string{"path": "workspace/src/note.txt"})
	if !res.OK || !strings.Contains(callOutput(res), viewContent) {
		t.Errorf("read_file while a container is at its cap: %s", body)
	}
	cancel()
	if err := testutil.Poll(10*time.Second, func() error {
		if n := countFDs(t); n > before+8 {
			return fmt.Errorf("daemon holds %d fds, %d before the call", n, before)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// TestViewFDReserve (class 3): with sluiced's limit at 1024 and a tool
// whose cap alone would allow more, eight processes opening files until
// refused stop at the views' budget (the limit less the reserve), and
// the daemon still serves a read_file. A lowered hard limit cannot be
// raised again without CAP_SYS_RESOURCE, so the test runs in a child
// test process of its own.
func TestViewFDReserve(t *testing.T) {
	testutil.RequireRoot(t)
	if os.Getenv("SLUICE_TEST_FD_RESERVE") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestViewFDReserve$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "SLUICE_TEST_FD_RESERVE=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestViewFDReserve") {
			t.Fatalf("child test: %v\n%s", err, lastLines(string(out), 30))
		}
		return
	}
	_, m := viewsFixture(t, map[string]string{
		"hold": `"commands":[["python3","-c",` + mustString(holdScript(8)) + `]],"pool":0,"max_open_files":4096,"pids":64,"timeout_ms":60000`,
	})
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 1024, Max: 1024}); err != nil {
		t.Fatal(err)
	}
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.UIDRange = viewsUIDs })
	total, errs, cancel := holdOpen(t, h, "hold")
	defer cancel()
	if n := countFDs(t); n >= 1024-64 {
		t.Errorf("the daemon holds %d of its 1024 fds while a container holds %d files (%s)", n, total, errs)
	}
	if total > 1024-256 || errs != "EMFILE" {
		t.Errorf("the container holds %d files (refused with %s), want at most the budget %d, EMFILE", total, errs, 1024-256)
	}
	res, body := h.call("read_file", map[string]string{"path": "workspace/src/note.txt"})
	if !res.OK || !strings.Contains(callOutput(res), viewContent) {
		t.Errorf("read_file while the views are at their budget: %s", body)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestContainerNofileLimit: a container's RLIMIT_NOFILE matches its
// view's cap (default max_open_files 256, plus 64 for pipes and files
// that do not come through the view).
func TestContainerNofileLimit(t *testing.T) {
	_, m := viewsFixture(t, map[string]string{
		"limits":       `"commands":[["cat","/proc/self/limits"]],"pool":0`,
		"limits_small": `"commands":[["cat","/proc/self/limits"]],"pool":0,"max_open_files":100`,
	})
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.UIDRange = viewsUIDs })
	for tool, want := range map[string]string{"limits": "320 320", "limits_small": "164 164"} {
		res, body := h.call(tool, map[string]any{})
		var got string
		for _, line := range strings.Split(callOutput(res), "\n") {
			if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
				f := strings.Fields(rest)
				if len(f) >= 2 {
					got = f[0] + " " + f[1]
				}
			}
		}
		if got != want {
			t.Errorf("%s: Max open files %q inside, want %q: %s", tool, got, want, body)
		}
	}
}

// TestViewReaddirMany: a directory of 5000 entries is listed whole
// through the view's chunked stream (32 KiB of getdents at a time), a
// never-listed name and a FIFO absent (read twice, each a fresh opendir).
func TestViewReaddirMany(t *testing.T) {
	fx, m := viewsFixture(t, map[string]string{
		"ls": `"commands":[["python3","-c","import os\nfor _ in range(2):\n  n = os.listdir('many')\n  print(len(n), len(set(n)), sorted(n)[0], sorted(n)[-1], 'id.pem' in n, 'fifo' in n)"]],"pool":0`,
	})
	many := filepath.Join(fx.Base, "workspace/src/many")
	if err := os.Mkdir(many, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		if err := os.WriteFile(filepath.Join(many, fmt.Sprintf("f%04d-%s", i, strings.Repeat("n", 40))), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Must(t, os.WriteFile(filepath.Join(many, "id.pem"), []byte(escapetest.Secret), 0o644))
	if err := unix.Mkfifo(filepath.Join(many, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.UIDRange = viewsUIDs })
	res, body := h.call("ls", map[string]any{})
	line := fmt.Sprintf("5000 5000 f0000-%s f4999-%s False False\n", strings.Repeat("n", 40), strings.Repeat("n", 40))
	if callOutput(res) != line+line {
		t.Errorf("listing through the view: %q, want twice %q: %s", callOutput(res), line, body)
	}
}

func mustString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestHardLinksUnderNever: a hard link to a never-listed file under an
// innocent name (the fixture's workspace/src/innocent.txt, a link to
// .env) is refused by a tool with never globs, since its other names
// cannot be checked: a read, an overwrite and a delete answer
// unsupported_file_type, and a container's cat of it fails (the view
// answers EACCES at open). With hard_links "allow", or without never
// globs, all of them work (docs/security.md, "The third review").
func TestHardLinksUnderNever(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		refused     bool
	}{
		{"never", `"never":[".env"]`, true},
		{"never and hard_links allow", `"never":[".env"],"hard_links":"allow"`, false},
		{"no never", `"max_bytes":4096`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testutil.RequireRoot(t)
			fx := escapetest.Build(t)
			tool := func(op, keys string) string {
				return fmt.Sprintf(`{"operation":%q,%s,%s}`, op, keys, tc.extra)
			}
			m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{`+
				`"read_file":`+tool("read", `"roots":["workspace/src"]`)+
				`,"list_dir":`+tool("list", `"roots":["workspace/src"]`)+
				`,"write_file":`+tool("write", `"roots":["workspace/src"]`)+
				`,"delete_file":`+tool("delete", `"roots":["workspace/src"]`)+
				`,"cat":`+tool("execute", `"mounts":["workspace/src"],"cwd":"workspace/src","commands":[["cat","innocent.txt"]],"pool":0`)+
				`}}`)
			h := start(t, m, securefs.ModeAuto, func(c *Config) { c.UIDRange = viewsUIDs })
			leaks := func(what string, res *api.CallResult, body []byte) {
				t.Helper()
				got := strings.Contains(string(body), escapetest.Secret)
				if tc.refused && (res.OK || got) {
					t.Errorf("%s of a hard link to .env: ok=%v %s, %s", what, res.OK, res.Reason, body)
				}
				if !tc.refused && (!res.OK || !got) {
					t.Errorf("%s of a hard link, allowed: ok=%v %s, %s", what, res.OK, res.Reason, body)
				}
			}
			res, body := h.call("read_file", map[string]any{"path": "workspace/src/innocent.txt"})
			leaks("read_file", res, body)
			if tc.refused && res.Reason != api.ReasonUnsupportedFileType {
				t.Errorf("read_file: %s, want unsupported_file_type", res.Reason)
			}
			res, body = h.call("cat", map[string]any{})
			leaks("cat in a container", res, body)
			// A listing shows the name (and its kind): the content is
			// what is refused.
			if res, body := h.call("list_dir", map[string]any{"path": "workspace/src"}); !res.OK || !strings.Contains(string(body), "innocent.txt") {
				t.Errorf("list_dir: %s %s", res.Reason, body)
			}
			for _, c := range []struct {
				tool string
				args map[string]any
			}{
				{"write_file", map[string]any{"path": "workspace/src/innocent.txt", "content": "x", "mode": "overwrite"}},
				{"delete_file", map[string]any{"path": "workspace/src/innocent.txt"}},
			} {
				res, body := h.call(c.tool, c.args)
				switch {
				case tc.refused && (res.OK || res.Reason != api.ReasonUnsupportedFileType):
					t.Errorf("%s of a hard link to .env: %s, want unsupported_file_type: %s", c.tool, res.Reason, body)
				case !tc.refused && !res.OK:
					t.Errorf("%s of a hard link, allowed: %s %s", c.tool, res.Reason, body)
				}
			}
			env, err := os.ReadFile(filepath.Join(fx.Base, "workspace/src/.env"))
			if err != nil || !strings.HasPrefix(string(env), escapetest.Secret) {
				t.Errorf(".env after the calls: %q %v", env, err)
			}
		})
	}
}

// TestViewsStopAfterLongSession does what a long MCP session does: many
// calls of pooled execute tools that read through their views, commands
// cancelled by id mid-call and clients gone mid-call, a reload (new
// views and pools beside the old ones until the old drain), then a
// shutdown with a command still running. Every view must stop when its
// containers are gone: the shutdown must not log a view still serving
// (issue 24: seen once after a long MCP session, not reproduced by this
// test; fsview.Diag says what the log line names when one is).
func TestViewsStopAfterLongSession(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	m := writeManifest(t, fx.Base, `{"schema_version":1,
	  "principals":{"ops":{"uids":[0],"approver":true,"tools":["*"]}},
	  "tools":{
	    "look":{"operation":"execute","mounts":["workspace/src"],"cwd":"workspace/src","never":[".env","*.pem"],
	            "commands":[["sh","-c","ls; cat a.py sub/b.txt; find . -name '*.txt' | head -3"]],"pool":2},
	    "sleeper":{"operation":"execute","mounts":["workspace/src"],"cwd":"workspace/src/sub","never":[".env"],
	            "commands":[["sh","-c","cat b.txt; exec sleep 30"]],"pool":2,"timeout_ms":60000}}}`)
	dir := t.TempDir()
	logs := &testutil.LockedBuffer{}
	runDir := checkedRunDir(t)
	cfg := Config{Manifest: m, Socket: filepath.Join(dir, "s.sock"), StateDir: filepath.Join(dir, "state"),
		Logger: slog.New(slog.NewJSONHandler(logs, nil)), RunDir: runDir, Helper: testutil.Helper(t), UIDRange: viewsUIDs,
		ShutdownGrace: 100 * time.Millisecond}
	stopped := false
	stop := launch(t, cfg)
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	c := client.New(cfg.Socket)
	ctx := context.Background()
	for i := range 12 {
		res, err := c.Call(ctx, api.CallRequest{Tool: "look"})
		if err != nil || !res.OK || res.Output == nil || !strings.Contains(*res.Output, "hello") {
			t.Fatalf("look %d: %+v %v", i, res, err)
		}
		// A command cancelled by id once it has started (it printed).
		s := startStream(c, ctx, api.CallRequest{Tool: "sleeper", Stream: true})
		id := s.next(t, "the sleeper's decision").CallID
		for ev := s.next(t, "the sleeper's output"); ev.Event != api.EventOutput; ev = s.next(t, "the sleeper's output") {
		}
		if _, err := c.CancelCall(ctx, id); err != nil {
			t.Fatal(err)
		}
		if r := s.wait(t); r.Reason != api.ReasonCancelled {
			t.Fatalf("sleeper %d: %+v", i, r)
		}
		// A client that goes away mid-call.
		gctx, gone := context.WithCancel(ctx)
		s = startStream(c, gctx, api.CallRequest{Tool: "sleeper", Stream: true})
		for ev := s.next(t, "the sleeper's decision"); ev.Event != api.EventOutput; ev = s.next(t, "the sleeper's output") {
		}
		gone()
		<-s.done
		if i == 5 {
			if _, err := c.Reload(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// And a command still running when the daemon stops.
	s := startStream(c, ctx, api.CallRequest{Tool: "sleeper", Stream: true})
	for ev := s.next(t, "the sleeper's decision"); ev.Event != api.EventOutput; ev = s.next(t, "the sleeper's output") {
	}
	stopped = true
	stop()
	<-s.done
	c.Close()
	if strings.Contains(logs.String(), "still serving") {
		t.Fatalf("a view outlived its containers:\n%s", logs.String())
	}
}

// review8Script runs in the container with cwd workspace/src: it settles
// in d (cwd and a held fd of it), lists it, says READY, waits for the
// host's "go" (a file the host creates after its edits: an event, not a
// timer), then tries everything a command can do relative to where it
// sits and prints what it got.
const review8Script = `
import os, sys
os.chdir("d")
held = os.open(".", os.O_RDONLY)
print("BEFORE", sorted(os.listdir(".")), sorted(os.listdir(held)), open("a").read().strip(), flush=True)
print("READY", flush=True)
go = sys.argv[1] + "/go"
while not os.path.exists(go):
    os.sched_yield()
def attempt(what, fn):
    try:
        print(what, repr(fn()), flush=True)
    except OSError as e:
        print(what, "refused", e.errno, flush=True)
attempt("list-cwd", lambda: sorted(os.listdir(".")))
attempt("list-held", lambda: sorted(os.listdir(held)))
attempt("read-new", lambda: open("SECRET").read())
attempt("read-a", lambda: open("a").read())
attempt("read-sub", lambda: open("sub/SECRET2").read())
attempt("list-sibling", lambda: sorted(os.listdir("../keys.pem")))
attempt("read-sibling", lambda: open("../keys.pem/SECRET").read())
attempt("stat-sibling", lambda: os.lstat("../keys.pem").st_mode)
attempt("walk-src", lambda: sorted(os.path.join(r, f) for r, _, fs in os.walk(sys.argv[1]) for f in fs))
print("DONE", flush=True)
`

// TestReview8CwdRenamedDuringCommand (black-box, over the socket): while
// an execute command sits in an allowed directory (its cwd, and an fd it
// holds), the host renames that directory to a never name and puts a
// secret in it. Nothing of the secret (its name or content) reaches the
// command, relative to its cwd, through its held fd, through "..", or by
// a walk of the mount.
// docs/security.md, "The eighth review"
func TestReview8CwdRenamedDuringCommand(t *testing.T) {
	fx, m := viewsFixture(t, map[string]string{
		"probe": `"commands":[["python3","-c",` + mustString(review8Script) + `,"{ARG}"]],"pool":0,"timeout_ms":60000`,
	})
	src := filepath.Join(fx.Base, "workspace/src")
	m2, err := os.ReadFile(m)
	testutil.Must(t, err)
	testutil.Must(t, os.WriteFile(m, []byte(strings.ReplaceAll(string(m2), "{ARG}", src)), 0o644))
	testutil.Must(t, os.MkdirAll(filepath.Join(src, "d/sub"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "d/a"), []byte("a-before\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "d/sub/b"), []byte("b\n"), 0o644))
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.UIDRange = viewsUIDs })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startStream(h.c, ctx, api.CallRequest{Tool: "probe", Args: json.RawMessage(`{}`)})
	var out string
	for !strings.Contains(out, "READY\n") {
		ev := s.next(t, "READY")
		switch ev.Event {
		case "output":
			out += ev.Data
		case "result":
			t.Fatalf("the probe ended before READY: %s %q", ev.Reason, out)
		}
	}
	// The host's edits, then "go".
	testutil.Must(t, os.Rename(filepath.Join(src, "d"), filepath.Join(src, "keys.pem")))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "keys.pem/SECRET"), []byte("SLUICE-SECRET-R8\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "keys.pem/sub/SECRET2"), []byte("SLUICE-SECRET-R8\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "keys.pem/a"), []byte("SLUICE-SECRET-R8-A\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "go"), nil, 0o644))
	for !strings.Contains(out, "DONE\n") {
		ev := s.next(t, "DONE")
		switch ev.Event {
		case "output":
			out += ev.Data
		case "result":
			if !strings.Contains(out, "DONE\n") {
				t.Fatalf("the probe ended before DONE: %s %q", ev.Reason, out)
			}
		}
	}
	t.Logf("probe:\n%s", out)
	after := out[strings.Index(out, "READY\n"):]
	for _, leak := range []string{"SLUICE-SECRET", "SECRET"} {
		if strings.Contains(after, leak) {
			t.Errorf("the command saw %q after its directory was renamed to a never name:\n%s", leak, after)
		}
	}
	if !strings.Contains(out, fmt.Sprintf("BEFORE ['a', 'sub'] ['a', 'sub'] a-before")) {
		t.Errorf("the probe did not start as expected:\n%s", out)
	}
	cancel()
	<-s.done
}

// TestReview8RecycledUIDReachesNoOtherView (black-box): with a uid range
// of two ids, a container of tool b soon runs as a uid a container of
// tool a ran as a moment before. Tool b's container reaches nothing of
// tool a's view: not by a's mount path, nor by a search of its whole
// file system.
// docs/security.md, "The eighth review"
func TestReview8RecycledUIDReachesNoOtherView(t *testing.T) {
	fx, m := viewsFixture(t, map[string]string{
		"a": `"commands":[["sh","-c","id -u; cat note.txt"]],"pool":0`,
	})
	src := filepath.Join(fx.Base, "workspace/src")
	other := filepath.Join(fx.Base, "workspace/other")
	testutil.Must(t, os.MkdirAll(other, 0o755))
	testutil.Must(t, os.Chmod(other, 0o755))
	probe := fmt.Sprintf(`id -u; cat %[1]s/note.txt; ls %[1]s; echo FIND; find / \( -path /proc -o -path /sys \) -prune -o -name note.txt -print 2>/dev/null; echo END; grep -h sluice /proc/self/mountinfo`, src)
	body, err := os.ReadFile(m)
	testutil.Must(t, err)
	b := strings.Replace(string(body), `,"a":{`, `,"b":{"operation":"execute","mounts":["workspace/other"],"cwd":"workspace/other","pool":0,"commands":[["sh","-c",`+mustString(probe)+`]]},"a":{`, 1)
	testutil.Must(t, os.WriteFile(m, []byte(b), 0o644))
	var runDir string
	h := start(t, m, securefs.ModeAuto, func(c *Config) {
		c.UIDRange = sandbox.IDRange{First: 0x7F030010, Last: 0x7F030011}
		runDir = c.RunDir
	})
	uidOf := func(out string) string { return strings.SplitN(strings.TrimSpace(out), "\n", 2)[0] }
	// A container is destroyed in the background after its call; until
	// then its uid is out of use, and on a busy machine the next tool took
	// the other uid every time. Each call waits for the last one's
	// container to be gone (its uid is given back right after its rootfs
	// goes), so a uid is recycled whenever one is free.
	settled := func() {
		waitFor(t, "the last call's container to go", func() bool { return sandbox.Containers(runDir) == 0 })
	}
	seen := map[string]bool{}
	recycled := false
	for i := 0; i < 20 && !recycled; i++ {
		settled()
		res, raw := h.call("a", map[string]any{})
		out := callOutput(res)
		if !strings.Contains(out, viewContent) {
			t.Fatalf("tool a does not read its own view: %s", raw)
		}
		seen[uidOf(out)] = true
		settled()
		res, raw = h.call("b", map[string]any{})
		out = callOutput(res)
		if res.Reason != api.ReasonAllowed {
			t.Fatalf("tool b: %s", raw)
		}
		found := ""
		if i, j := strings.Index(out, "FIND\n"), strings.Index(out, "END\n"); i >= 0 && j > i {
			found = strings.TrimSpace(out[i+5 : j])
		}
		if strings.Contains(out, viewContent) || found != "" || !strings.Contains(out, "END\n") {
			t.Errorf("tool b's container (uid %s) reached tool a's view:\n%s", uidOf(out), out)
		}
		recycled = seen[uidOf(out)]
	}
	if !recycled {
		t.Errorf("tool b never ran as a uid tool a had run as: %v", seen)
	}
}

// TestReview8PooledCwdReplacedBetweenCalls (black-box): a pooled
// container settles in its cwd (a directory beneath the mount) before
// the call that uses it. Between two calls the host renames that
// directory to a never name, fills it, and makes a new one at the path.
// The second call (from the pool: its cwd is the old directory's entry)
// sees nothing of the renamed directory, and lists the new one, as a
// command started after the edit must.
// docs/security.md, "The eighth review"
func TestReview8PooledCwdReplacedBetweenCalls(t *testing.T) {
	fx := escapetest.Build(t)
	src := filepath.Join(fx.Base, "workspace/src")
	testutil.Must(t, os.MkdirAll(filepath.Join(src, "d"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "d/a"), []byte("a\n"), 0o644))
	m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{
		"look":{"operation":"execute","mounts":["workspace/src"],"cwd":"workspace/src/d","never":[".env","*.pem"],
			"commands":[["sh","-c","echo LS; ls; echo CAT; cat SECRET a 2>&1; ls ../keys.pem 2>&1; echo END"]],"pool":1}}}`)
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.UIDRange = viewsUIDs })
	look := func() string {
		t.Helper()
		res, body := h.call("look", map[string]any{})
		if res.Reason != api.ReasonAllowed {
			t.Fatalf("look: %s", body)
		}
		return callOutput(res)
	}
	if got := look(); !strings.Contains(got, "LS\na\nCAT") {
		t.Fatalf("first look: %q", got)
	}
	// Let the pool refill, from before the edit: a second look uses it.
	if got := look(); !strings.Contains(got, "LS\na\nCAT") {
		t.Fatalf("second look: %q", got)
	}
	testutil.Must(t, os.Rename(filepath.Join(src, "d"), filepath.Join(src, "keys.pem")))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "keys.pem/SECRET"), []byte("SLUICE-SECRET-R8\n"), 0o644))
	testutil.Must(t, os.Mkdir(filepath.Join(src, "d"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "d/new"), []byte("new\n"), 0o644))
	for i := range 3 {
		got := look()
		t.Logf("look %d after the edit:\n%s", i, got)
		if strings.Contains(got, "SLUICE-SECRET") || strings.Contains(got, "\nSECRET\n") {
			t.Errorf("look %d saw the renamed directory's secret:\n%s", i, got)
		}
		if !strings.Contains(got, "LS\nnew\nCAT") {
			t.Errorf("look %d does not list the directory now at its cwd's path:\n%s", i, got)
		}
	}
}
