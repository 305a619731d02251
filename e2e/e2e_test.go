//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
)

var binDir string

func TestMain(m *testing.M) {
	binDir = os.Getenv("SLUICE_BIN_DIR")
	if binDir == "" || !exists(filepath.Join(binDir, "sluiced")) {
		dir, err := os.MkdirTemp("", "sluice-e2e-bin")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		cmd := exec.Command("go", "build", "-tags", "seccomp", "-o", dir+"/", "../cmd/sluiced", "../cmd/sluice", "../cmd/sluice-init")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build binaries: %v\n%s", err, out)
			os.Exit(1)
		}
		if out, err := exec.Command("gcc", "-static", "-O2", "-s", "-o", dir+"/sluice-helper", "../sandbox/helper/helper.c").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build helper: %v\n%s", err, out)
			os.Exit(1)
		}
		binDir = dir
	}
	md, err := setupManaged()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	if md == nil {
		testutil.Main(m)
		return
	}
	managed = md
	fmt.Fprintf(os.Stderr, "e2e: against the managed sluiced at %s (manifest %s); tests that own their daemon start one\n", md.socket, md.manifest)
	testutil.MainWith(m, md.teardown)
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

type daemon struct {
	t        *testing.T
	cmd      *exec.Cmd
	socket   string
	stateDir string
	runDir   string
	manifest string
	logs     fmt.Stringer // its stderr, or the managed daemon's log
	c        *client.Client
	exited   chan error
	managed  *managedDaemon // set when the test uses the managed daemon
	released bool
}

// startDaemon gives the test a sluiced serving manifest: the managed one
// when SLUICE_E2E_SOCKET is set (see managed_test.go), else its own.
func startDaemon(t *testing.T, manifest string) *daemon {
	t.Helper()
	if managed == nil {
		return startOwnDaemon(t, manifest)
	}
	d := &daemon{t: t, socket: managed.socket, stateDir: managed.stateDir, runDir: managed.runDir,
		manifest: manifest, logs: commandLog{managed}, managed: managed, c: client.New(managed.socket)}
	t.Cleanup(d.stop)
	managed.use(d)
	return d
}

// containers counts the daemon's containers (their rootfs dirs), as its
// own mount namespace shows them (see managedDaemon.nsRunDir).
func (d *daemon) containers() int {
	if d.managed != nil {
		return sandbox.Containers(d.managed.nsRunDir())
	}
	return sandbox.Containers(d.runDir)
}

// startOwnDaemon starts a sluiced process of the test's own: for tests
// that signal, kill or restart it.
func startOwnDaemon(t *testing.T, manifest string) *daemon {
	t.Helper()
	dir := t.TempDir()
	d := &daemon{t: t, socket: filepath.Join(dir, "s.sock"), stateDir: filepath.Join(dir, "state"),
		runDir: filepath.Join(dir, "run"), manifest: manifest}
	d.start()
	t.Cleanup(d.stop)
	return d
}

func (d *daemon) start() {
	d.t.Helper()
	stderr := &testutil.LockedBuffer{}
	d.logs = stderr
	d.cmd = exec.Command(filepath.Join(binDir, "sluiced"), "--manifest", d.manifest, "--socket", d.socket,
		"--state-dir", d.stateDir, "--run-dir", d.runDir)
	d.cmd.Stderr = stderr
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.exited = make(chan error, 1)
	go func() { d.exited <- d.cmd.Wait() }()
	d.c = client.New(d.socket)
	exited := false
	// A start can be long: recovery of a changeset a kill cut short
	// reads back every file it named (TestChangesetKilledMidCommit took
	// over 10 s under the VM's TCG emulation). Ready is the event; the
	// bound only ends a start that hangs.
	err := testutil.Poll(120*time.Second, func() error {
		select {
		case err := <-d.exited:
			exited = true
			d.t.Errorf("sluiced exited: %v", err)
			return nil // no use waiting longer
		default:
		}
		_, err := d.c.Health(context.Background())
		return err
	})
	if exited || err != nil {
		d.t.Fatalf("sluiced not ready: %v\n%s", err, d.logs)
	}
}

func (d *daemon) stop() {
	if d.managed != nil {
		if !d.released {
			d.released = true
			d.c.Close()
			d.managed.release(d)
		}
		return
	}
	if d.cmd == nil {
		return
	}
	d.c.Close()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(15 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
		d.t.Errorf("sluiced ignored SIGTERM")
	}
	d.cmd = nil
}

// leftovers is what the daemon's containers left in the kernel's view:
// for the managed daemon, in its service's layout and outside it.
func (d *daemon) leftovers() []string {
	if d.managed != nil {
		return d.managed.leftovers()
	}
	return sandbox.Leftovers(d.runDir)
}

func (d *daemon) ledger() string { return filepath.Join(d.stateDir, "audit.jsonl") }

func (d *daemon) read(tool, path string) (*api.CallResult, []byte) {
	d.t.Helper()
	body, _ := json.Marshal(map[string]any{"tool": tool, "args": map[string]string{"path": path}})
	code, b, err := d.c.CallRaw(context.Background(), body)
	if err != nil || code != 200 {
		d.t.Fatalf("call: %d %v %s", code, err, b)
	}
	var res api.CallResult
	json.Unmarshal(b, &res)
	return &res, b
}

func sluice(t *testing.T, socket string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "sluice"), args...)
	cmd.Env = append(os.Environ(), "SLUICE_SOCKET="+socket)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// TestEscapeTable: the one table, black-box, over the real socket of a
// real sluiced process.
func TestEscapeTable(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	d := startDaemon(t, fx.Manifest)
	for _, c := range escapetest.Cases {
		res, body := d.read(escapetest.ToolFor(c.Op), fx.PathFor(c))
		if bytes.Contains(body, []byte(escapetest.Secret)) {
			t.Errorf("%s: ESCAPE: %s", c.Name, body)
		}
		if res.Reason != c.Want {
			t.Errorf("%s: reason %s, want %s", c.Name, res.Reason, c.Want)
		}
		if err := fx.CheckResolved(c, res.Resource); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
	}
	d.stop()
	if out, _, code := sluice(t, d.socket, "audit", "verify", d.ledger()); code != 0 {
		t.Fatalf("audit verify: %d %s", code, out)
	}
	if b, _ := os.ReadFile(d.ledger()); bytes.Contains(b, []byte(escapetest.Secret)) {
		t.Fatal("a secret reached the ledger")
	}
	if strings.Contains(d.logs.String(), escapetest.Secret) {
		t.Fatal("a secret reached the daemon's log")
	}
}

// TestSymlinkSwapRace: while names inside the root flip between a file
// inside and symlinks leading out, concurrent clients read them for 2 s
// over the socket; no response ever carries an outside byte.
func TestSymlinkSwapRace(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	d := startDaemon(t, fx.Manifest)
	src := filepath.Join(fx.Base, "workspace/src")
	testutil.Must(t, os.WriteFile(filepath.Join(src, "inside.txt"), []byte("inside\n"), 0o644))
	var wg sync.WaitGroup
	sw := testutil.Swap(t, func(i int) error {
		tmp := filepath.Join(src, "race.new")
		target, dir := "inside.txt", "."
		if i%2 == 0 {
			target, dir = "../../secret.txt", "../.."
		}
		// race.new was renamed away and d may not exist yet: only
		// their absence may make a remove fail.
		if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.Remove(filepath.Join(src, "d")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return errors.Join(os.Symlink(target, tmp), os.Rename(tmp, filepath.Join(src, "race")),
			os.Symlink(dir, filepath.Join(src, "d")))
	})
	var calls, inside atomic.Int64
	deadline := time.Now().Add(2 * time.Second)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client.New(d.socket)
			defer c.Close()
			paths := []string{"workspace/src/race", "workspace/src/d/secret.txt", "workspace/src/d/inside.txt"}
			for i := 0; time.Now().Before(deadline); i++ {
				body, _ := json.Marshal(map[string]any{"tool": "read_file", "args": map[string]string{"path": paths[(i+w)%3]}})
				_, b, err := c.CallRaw(context.Background(), body)
				if err != nil {
					t.Error(err)
					return
				}
				calls.Add(1)
				if bytes.Contains(b, []byte(escapetest.Secret)) {
					t.Errorf("ESCAPE under race: %s", b)
					return
				}
				if bytes.Contains(b, []byte(`"output":"inside\n"`)) {
					inside.Add(1)
				}
			}
		}()
	}
	wg.Wait() // the callers stop at the deadline
	if err := sw.Stop(); err != nil {
		t.Fatalf("swap: %v", err)
	}
	t.Logf("%d swaps, %d calls under a swap race, %d read the inside file, none outside", sw.Swaps(), calls.Load(), inside.Load())
	if sw.Swaps() == 0 {
		t.Fatal("no swap completed: the race proved nothing")
	}
	if inside.Load() == 0 {
		t.Fatal("no call read the inside file: the race proved nothing")
	}
}

func TestCLI(t *testing.T) {
	fx := escapetest.Build(t)
	d := startDaemon(t, fx.Manifest)
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"call", "read_file", "--args", `{"path":"workspace/src/a.py"}`}, 0, "hello"},
		{[]string{"call", "--args", `{"path":"workspace/src/a.py"}`, "read_file", "--json"}, 0, `"verdict": "allow"`},
		// The result's source passes through --json, streamed or not.
		{[]string{"call", "read_file", "--args", `{"path":"workspace/src/a.py"}`, "--json"}, 0, `"untrusted": true`},
		{[]string{"call", "read_file", "--args", `{"path":"workspace/src/a.py"}`, "--stream", "--json"}, 0, `"untrusted":true`},
		{[]string{"call", "read_file", "--args", `{"path":"workspace/src/.env"}`}, 3, ""},
		{[]string{"call", "read_file", "--args", `{"path":"workspace/src/a.py"}`, "--stream"}, 0, "hello"},
		{[]string{"call", "read_file", "--args", `{not json`}, 2, ""},
		{[]string{"call", "read_file", "--args", `{"path":5}`}, 2, ""},
		{[]string{"call"}, 2, ""},
		{[]string{"tools"}, 0, "read_file"},
		{[]string{"tools", "--json"}, 0, `"args_schema"`},
		{[]string{"health"}, 0, "policy_version sha256:"},
		{[]string{"--help"}, 0, "Commands:"},
		{[]string{"call", "--help"}, 0, "Exit:"},
		{[]string{"bogus"}, 2, ""},
		{[]string{"--socket", "/nonexistent/s.sock", "health"}, 2, ""},
	} {
		out, errOut, code := sluice(t, d.socket, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("sluice %v: exit %d (want %d), out %q, err %q", tc.args, code, tc.code, out, errOut)
		}
	}
	// Without --json, stdout is the output alone (it goes to pipes and
	// files as it is): no source in it.
	if out, _, _ := sluice(t, d.socket, "call", "read_file", "--args", `{"path":"workspace/src/a.py"}`); out != "print('hello')\n" {
		t.Errorf("sluice call's stdout: %q", out)
	}
	_, errOut, _ := sluice(t, d.socket, "call", "read_file", "--args", `{"path":"workspace/src/.env"}`)
	if !strings.Contains(errOut, "denied: never_listed") {
		t.Errorf("denial message: %q", errOut)
	}
	d.stop()
	// verify and tail; then tamper and verify again.
	if out, _, code := sluice(t, "", "audit", "tail", "-n", "3", d.ledger()); code != 0 || strings.Count(out, "\n") != 3 {
		t.Errorf("audit tail: %d %q", code, out)
	}
	// Tamper with a copy (the managed daemon's ledger is live): the last
	// decision's verdict, which verify must catch at that record's seq.
	b, err := os.ReadFile(d.ledger())
	testutil.Must(t, err)
	lines := bytes.SplitAfter(b, []byte("\n"))
	seq := -1
	for i := len(lines) - 1; i >= 0 && seq < 0; i-- {
		var rec struct {
			Seq     int    `json:"seq"`
			Verdict string `json:"verdict"`
		}
		if json.Unmarshal(lines[i], &rec) == nil && rec.Verdict != "" {
			seq = rec.Seq
			lines[i] = bytes.Replace(lines[i], []byte(`"verdict":"`+string(rec.Verdict)+`"`), []byte(`"verdict":"ALLOW"`), 1)
		}
	}
	if seq < 0 {
		t.Fatal("no decision in the ledger")
	}
	tampered := writeFile(t, t.TempDir(), "audit.jsonl", string(bytes.Join(lines, nil)))
	out, _, code := sluice(t, "", "audit", "verify", tampered)
	if want := fmt.Sprintf("BROKEN at seq %d", seq); code != 1 || !strings.Contains(out, want) {
		t.Errorf("tampered ledger: exit %d, %q, want %q", code, out, want)
	}
}

func TestSignals(t *testing.T) {
	fx := escapetest.Build(t)
	d := startOwnDaemon(t, fx.Manifest)
	ctx := context.Background()
	before, _ := d.c.Health(ctx)
	// SIGHUP with an invalid manifest: refused, old one kept, still serving.
	orig, err := os.ReadFile(fx.Manifest)
	testutil.Must(t, err)
	testutil.Must(t, os.WriteFile(fx.Manifest, []byte(`{"schema_version":1,"tools":{}}`), 0o644))
	d.cmd.Process.Signal(syscall.SIGHUP)
	if err := testutil.Poll(10*time.Second, func() error { // the refusal is the event
		if !strings.Contains(d.logs.String(), "reload refused") {
			return errors.New("no refusal logged")
		}
		return nil
	}); err != nil {
		t.Fatalf("refusal not logged: %s", d.logs)
	}
	if h, err := d.c.Health(ctx); err != nil || h.PolicyVersion != before.PolicyVersion {
		t.Fatalf("after bad SIGHUP: %v %v", h, err)
	}
	// SIGHUP with a valid change.
	testutil.Must(t, os.WriteFile(fx.Manifest, bytes.Replace(orig, []byte("4096"), []byte("1024"), 1), 0o644))
	d.cmd.Process.Signal(syscall.SIGHUP)
	if err := testutil.Poll(10*time.Second, func() error {
		h, err := d.c.Health(ctx)
		if err == nil && h.PolicyVersion == before.PolicyVersion {
			err = errors.New("policy version unchanged")
		}
		return err
	}); err != nil {
		t.Fatalf("SIGHUP did not reload: %v", err)
	}
	// SIGTERM: clean exit, socket gone, ledger intact.
	d.c.Close()
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-d.exited; err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	d.cmd = nil
	if exists(d.socket) {
		t.Fatal("socket left behind")
	}
	if out, _, code := sluice(t, "", "audit", "verify", d.ledger()); code != 0 {
		t.Fatal(out)
	}
}

// TestCrashRecovery: SIGKILL mid-life, a torn record appended, restart:
// the daemon cuts the torn line, records that it did, and the chain holds.
func TestCrashRecovery(t *testing.T) {
	fx := escapetest.Build(t)
	d := startOwnDaemon(t, fx.Manifest)
	for range 5 {
		d.read("read_file", "workspace/src/a.py")
	}
	d.cmd.Process.Kill()
	<-d.exited
	d.cmd = nil
	f, err := os.OpenFile(d.ledger(), os.O_WRONLY|os.O_APPEND, 0)
	testutil.Must(t, err)
	f.WriteString(`{"args":{"path":"workspace/src/a.py"},"call_id":"c-torn","ki`)
	f.Close()
	d.start() // the stale socket is taken over
	if res, _ := d.read("read_file", "workspace/src/a.py"); !res.OK {
		t.Fatal(res.Reason)
	}
	d.stop()
	out, _, code := sluice(t, "", "audit", "verify", d.ledger())
	if code != 0 {
		t.Fatalf("after recovery: %s", out)
	}
	b, err := os.ReadFile(d.ledger())
	testutil.Must(t, err)
	if !bytes.Contains(b, []byte(`"kind":"recovered"`)) || bytes.Contains(b, []byte("c-torn")) {
		t.Fatal("torn record not cut and recorded")
	}
}

func TestBadStart(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "Usage"},
		{[]string{"--manifest", filepath.Join(dir, "none.json")}, "no such file"},
		{[]string{"--manifest", writeFile(t, dir, "bad.json", `{"schema_version":1,"tools":{"r":{"operation":"read","roots":["../x"]}}}`)}, "tools.r.roots[0]"},
		// Every container's init runs as root: one others may write
		// is refused at start (docs/sandbox.md "CVE-2019-5736").
		{[]string{"--manifest", writeFile(t, dir, "exec.json", `{"schema_version":1,"tools":{"t":{"operation":"execute","commands":[["/bin/true"]]}}}`),
			"--init", worldWritable(t, filepath.Join(binDir, "sluice-init"), filepath.Join(dir, "sluice-init")), "--run-dir", filepath.Join(dir, "run")},
			"is writable by group or others"},
	} {
		cmd := exec.Command(filepath.Join(binDir, "sluiced"), append(tc.args, "--socket", filepath.Join(dir, "s"), "--state-dir", dir)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("sluiced %v: %v %s", tc.args, err, out)
		}
	}
}

// worldWritable copies src to dst, mode 0757.
func worldWritable(t *testing.T, src, dst string) string {
	b, err := os.ReadFile(src)
	testutil.Must(t, err)
	testutil.Must(t, os.WriteFile(dst, b, 0o700))
	testutil.Must(t, os.Chmod(dst, 0o757))
	return dst
}

func writeFile(t *testing.T, dir, name, body string) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
