//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
)

// agentCLI runs the real sluice CLI as uid 65534 (the manifest's agent).
func agentCLI(t *testing.T, socket string, args ...string) *exec.Cmd {
	t.Helper()
	dir := t.TempDir()
	testutil.Must(t, os.Chmod(dir, 0o755))
	testutil.Must(t, os.Chmod(filepath.Dir(dir), 0o755)) // the test's temp root is 0700
	b, err := os.ReadFile(filepath.Join(binDir, "sluice"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sluice")
	testutil.Must(t, os.WriteFile(bin, b, 0o755))
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"SLUICE_SOCKET=" + socket, "PATH=/usr/bin:/bin"}
	cred := &syscall.Credential{Uid: 65534, Gid: 65534}
	if managed != nil {
		// The service's socket is root:sluice 0660: an agent's user is a
		// member of group sluice (docs/operating.md, "Install as a service").
		g, err := user.LookupGroup("sluice")
		if err != nil {
			t.Fatalf("the managed daemon's socket group: %v", err)
		}
		gid, _ := strconv.ParseUint(g.Gid, 10, 32)
		cred.Groups = []uint32{uint32(gid)}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd
}

// openSocket lets uid 65534 reach the test's own daemon's socket; the
// managed daemon's is reached through group sluice (agentCLI).
func openSocket(t *testing.T, d *daemon) {
	t.Helper()
	if d.managed != nil {
		return
	}
	testutil.Must(t, os.Chmod(filepath.Dir(d.socket), 0o755))
	testutil.Must(t, os.Chmod(filepath.Dir(filepath.Dir(d.socket)), 0o755))
	testutil.Must(t, os.Chmod(d.socket, 0o666)) // the test's own socket: let uid 65534 in
}

// TestApprovalAndCancelThroughCLI: an agent's call waits, an operator
// approves it with a second CLI; a task is cancelled through the CLI.
func TestApprovalAndCancelThroughCLI(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	m := writeFile(t, fx.Base, "approve.json", `{"schema_version":1,
	  "principals":{"agent":{"uids":[65534],"tools":["*"]},"ops":{"uids":[0],"approver":true,"tools":[]}},
	  "tools":{"ask":{"operation":"read","roots":["workspace/src"],"approval":"human"},
	           "slow":{"operation":"execute","commands":[["sleep","30"]],"timeout_ms":60000,"pool":0}}}`)
	d := startDaemon(t, m)
	openSocket(t, d)

	call := agentCLI(t, d.socket, "call", "ask", "--args", `{"path":"workspace/src/a.py"}`, "--stream")
	var out bytes.Buffer
	call.Stdout = &out
	stderr, _ := call.StderrPipe()
	if err := call.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	id := ""
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "waiting for approval "); ok {
			id, _, _ = strings.Cut(rest, " ")
			break
		}
	}
	if id == "" {
		t.Fatal("the CLI never printed an approval id")
	}
	list, _, code := sluice(t, d.socket, "approvals")
	if code != 0 || !strings.Contains(list, id) || !strings.Contains(list, "agent") {
		t.Fatalf("sluice approvals: %d %s", code, list)
	}
	if o, e, code := sluice(t, d.socket, "approve", id, "--note", "ok by e2e"); code != 0 || !strings.Contains(o, "approved") {
		t.Fatalf("sluice approve: %d %s %s", code, o, e)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	if err := call.Wait(); err != nil {
		t.Fatalf("the approved call: %v", err)
	}
	if !strings.Contains(out.String(), "print('hello')") {
		t.Fatalf("approved output: %q", out.String())
	}
	if _, e, code := sluice(t, d.socket, "approve", id); code == 0 {
		t.Fatalf("re-used approval id accepted: %s", e)
	}

	slow := agentCLI(t, d.socket, "call", "slow", "--task", "e2e-task", "--stream", "--json")
	slowOut, _ := slow.StdoutPipe()
	if err := slow.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(slowOut)
	if !lines.Scan() || !strings.Contains(lines.Text(), `"verdict":"allow"`) {
		t.Fatalf("slow's first event: %q", lines.Text())
	}
	began := time.Now()
	cancel := agentCLI(t, d.socket, "tasks", "cancel", "e2e-task")
	if b, err := cancel.CombinedOutput(); err != nil || !strings.Contains(string(b), "cancelled task e2e-task") {
		t.Fatalf("sluice tasks cancel: %v %s", err, b)
	}
	var last string
	for lines.Scan() {
		last = lines.Text()
	}
	slow.Wait()
	t.Logf("the cancelled command ended %v after the cancel", time.Since(began))
	if !strings.Contains(last, `"reason":"task_cancelled"`) {
		t.Fatalf("slow's result: %s", last)
	}
	d.stop()
	if o, _, code := sluice(t, "", "audit", "verify", d.ledger()); code != 0 {
		t.Fatalf("audit verify: %s", o)
	}
}

// TestWriteKilledMidway: sluiced is SIGKILLed while writes of 700 KiB run;
// after a restart the file holds one whole version and no temp file is
// left.
func TestWriteKilledMidway(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	m := writeFile(t, fx.Base, "write.json", `{"schema_version":1,"tools":{
	  "w":{"operation":"write","roots":["workspace/src"],"max_bytes":8388608}}}`)
	target := filepath.Join(fx.Base, "workspace/src/big.bin")
	versions := map[string]bool{}
	for _, c := range []string{"A", "B", "C", "D"} {
		versions[strings.Repeat(c, 700<<10)] = true
	}
	testutil.Must(t, os.WriteFile(target, []byte(strings.Repeat("A", 700<<10)), 0o644))
	d := startOwnDaemon(t, m)
	results := make(chan error, 64)
	go func() {
		for i := 0; ; i++ {
			c := []string{"B", "C", "D", "A"}[i%4]
			args, _ := json.Marshal(map[string]any{"path": "workspace/src/big.bin", "content": strings.Repeat(c, 700<<10)})
			_, err := d.c.Call(context.Background(), api.CallRequest{Tool: "w", Args: args})
			results <- err
			if err != nil {
				return
			}
		}
	}()
	// Let a few writes commit, then kill while the next is under way.
	for i := 0; i < 3; i++ {
		if err := <-results; err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	d.cmd.Process.Kill()
	<-d.exited
	d.cmd = nil
	<-results // the write in flight fails with the daemon
	d.start()
	d.stop()
	b, err := os.ReadFile(target)
	testutil.Must(t, err)
	if !versions[string(b)] {
		t.Fatalf("the file is torn: %d bytes, starting %q", len(b), b[:min(8, len(b))])
	}
	ents, err := os.ReadDir(filepath.Dir(target))
	testutil.Must(t, err)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".sluice-tmp-") {
			t.Fatalf("a temp file survived the restart: %s", e.Name())
		}
	}
	if o, _, code := sluice(t, "", "audit", "verify", d.ledger()); code != 0 {
		t.Fatalf("audit verify after the crash: %s", o)
	}
}

// TestWriteKilledAtTemp: sluiced is SIGKILLed after an overwrite's temp
// file got its name (the call id's) and before the rename over the
// target. The kill waits on the temp name's IN_CREATE; the target is
// large and the call carries if_match, so the hash at commit holds the
// window open. After the kill the temp file is there; after a restart it
// is gone, the target has its old content, a recovered record names the
// call, and the ledger verifies.
func TestWriteKilledAtTemp(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	m := writeFile(t, fx.Base, "write.json", `{"schema_version":1,"tools":{
	  "w":{"operation":"write","roots":["workspace/src"]}}}`)
	dir := filepath.Join(fx.Base, "workspace/src")
	target := filepath.Join(dir, "big.bin")
	old := bytes.Repeat([]byte("A"), 48<<20)
	testutil.Must(t, os.WriteFile(target, old, 0o644))
	sum := sha256.Sum256(old)
	ifMatch := "sha256:" + hex.EncodeToString(sum[:])

	var killed string // the temp name found after the kill
	for attempt := 0; attempt < 3 && killed == ""; attempt++ {
		d := startOwnDaemon(t, m)
		in, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		testutil.Must(t, err)
		_, err = unix.InotifyAddWatch(in, dir, unix.IN_CREATE)
		testutil.Must(t, err)
		temps := make(chan string, 1)
		go func() {
			buf := make([]byte, 64<<10)
			for {
				n, err := unix.Read(in, buf)
				if err != nil || n <= 0 {
					return
				}
				for off := 0; off+unix.SizeofInotifyEvent <= n; {
					ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
					name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
					off += unix.SizeofInotifyEvent + int(ev.Len)
					if strings.HasPrefix(name, ".sluice-tmp-") {
						temps <- name
						return
					}
				}
			}
		}()
		args, _ := json.Marshal(map[string]any{"path": "workspace/src/big.bin", "content": "new\n", "if_match": ifMatch})
		done := make(chan error, 1)
		go func() {
			_, err := d.c.Call(context.Background(), api.CallRequest{Tool: "w", Args: args})
			done <- err
		}()
		var name string
		select {
		case name = <-temps:
		case err := <-done:
			t.Fatalf("the write ended before its temp name appeared: %v", err)
		case <-time.After(60 * time.Second):
			t.Fatal("no temp name within 60 s")
		}
		d.cmd.Process.Kill()
		<-d.exited
		d.cmd = nil
		<-done
		unix.Close(in) // ends the reader
		if exists(filepath.Join(dir, name)) {
			killed = name
		} else {
			t.Logf("attempt %d: the rename won the race; again", attempt)
			testutil.Must(t, os.WriteFile(target, old, 0o644))
		}
		if killed != "" {
			d.start()
			d.stop()
			if exists(filepath.Join(dir, killed)) {
				t.Fatalf("the temp file %s survived the restart", killed)
			}
			ents, err := os.ReadDir(dir)
			testutil.Must(t, err)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".sluice-tmp-") {
					t.Fatalf("a temp file survived the restart: %s", e.Name())
				}
			}
			b, err := os.ReadFile(target)
			testutil.Must(t, err)
			if !bytes.Equal(b, old) {
				t.Fatalf("the target changed: %d bytes, starting %q", len(b), b[:min(8, len(b))])
			}
			led, err := os.ReadFile(d.ledger())
			testutil.Must(t, err)
			callID := strings.TrimPrefix(killed, ".sluice-tmp-")
			if !bytes.Contains(led, []byte(`"call_id":"`+callID+`","detail":"removed the temp file of an interrupted write: workspace/src/`+killed+`","kind":"recovered"`)) {
				t.Errorf("no recovered record names the call %s:\n%s", callID, led)
			}
			if o, _, code := sluice(t, "", "audit", "verify", d.ledger()); code != 0 {
				t.Fatalf("audit verify after the crash: %s", o)
			}
		}
	}
	if killed == "" {
		t.Fatal("the kill never landed between the temp name and the rename")
	}
}

// TestReplay: calls to a real daemon, then `sluice replay` under the same
// manifest (nothing changes), a stricter one (known calls flip), and on a
// tampered ledger (exit 1).
func TestReplay(t *testing.T) {
	fx := escapetest.Build(t)
	d := startOwnDaemon(t, fx.Manifest)
	for _, p := range []string{"workspace/src/a.py", "workspace/src/sub/b.txt", "workspace/src/.env", "workspace/secret.txt"} {
		d.read("read_file", p)
	}
	d.stop()
	out, errOut, code := sluice(t, "", "replay", "--manifest", fx.Manifest, d.ledger())
	if code != 0 || !strings.Contains(out, "would change: 0 allow→deny, 0 deny→allow") || !strings.Contains(out, " 0 would change") {
		t.Fatalf("same manifest: %d %s %s", code, out, errOut)
	}
	raw, err := os.ReadFile(fx.Manifest)
	testutil.Must(t, err)
	strict := strings.Replace(string(raw), `"never": [`, `"never": ["sub/**", `, 1)
	if strict == string(raw) {
		t.Fatal("the fixture manifest has no never list to tighten")
	}
	sm := writeFile(t, fx.Base, "strict.json", strict)
	out, errOut, code = sluice(t, "", "replay", "--manifest", sm, d.ledger())
	if code != 0 || !strings.Contains(out, "1 allow→deny") || !strings.Contains(out, "workspace/src/sub/b.txt") || !strings.Contains(out, "never_listed") {
		t.Fatalf("stricter manifest: %d %s %s", code, out, errOut)
	}
	b, err := os.ReadFile(d.ledger())
	testutil.Must(t, err)
	tampered := writeFile(t, t.TempDir(), "audit.jsonl", strings.Replace(string(b), "workspace/src/a.py", "workspace/src/b.py", 1))
	if out, _, code := sluice(t, "", "replay", "--manifest", fx.Manifest, tampered); code != 1 || !strings.Contains(out, "BROKEN") {
		t.Fatalf("tampered: %d %s", code, out)
	}
	if _, _, code := sluice(t, "", "replay", d.ledger()); code != 2 {
		t.Fatalf("no --manifest: exit %d", code)
	}
}

// TestWriteDeleteBlackBox: writes and deletes through the real binary
// (in the VM, through the systemd-managed service, whose file system is
// read-only but for ReadWritePaths=): create, a chained overwrite, a stale
// if_match refused, a delete; the disk and the ledger agree.
func TestWriteDeleteBlackBox(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	m := writeFile(t, fx.Base, "writes.json", `{"schema_version":1,"tools":{
	  "w":{"operation":"write","roots":["workspace/src"],"never":[".env"]},
	  "rm":{"operation":"delete","roots":["workspace/src"]}}}`)
	d := startDaemon(t, m)
	call := func(tool string, args map[string]any) *api.CallResult {
		t.Helper()
		b, _ := json.Marshal(args)
		res, err := d.c.Call(context.Background(), api.CallRequest{Tool: tool, Args: b})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		return res
	}
	target := filepath.Join(fx.Base, "workspace/src/new.txt")
	first := call("w", map[string]any{"path": "workspace/src/new.txt", "content": "one\n", "if_match": "absent"})
	if !first.OK || first.SHA256 == "" {
		t.Fatalf("create: %+v", first)
	}
	second := call("w", map[string]any{"path": "workspace/src/new.txt", "content": "two\n", "if_match": first.SHA256})
	if !second.OK {
		t.Fatalf("chained overwrite: %+v", second)
	}
	if stale := call("w", map[string]any{"path": "workspace/src/new.txt", "content": "three\n", "if_match": first.SHA256}); stale.Reason != "precondition_failed" {
		t.Fatalf("stale if_match: %s", stale.Reason)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "two\n" {
		t.Fatalf("on disk: %q %v", b, err)
	}
	if env := call("w", map[string]any{"path": "workspace/src/.env", "content": "x"}); env.Reason != "never_listed" {
		t.Fatalf(".env write: %s", env.Reason)
	}
	if del := call("rm", map[string]any{"path": "workspace/src/new.txt", "if_match": second.SHA256}); !del.OK {
		t.Fatalf("delete: %+v", del)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Fatalf("the deleted file is still there: %v", err)
	}
	d.stop()
	if o, _, code := sluice(t, "", "audit", "verify", d.ledger()); code != 0 {
		t.Fatalf("audit verify: %s", o)
	}
	if b, _ := os.ReadFile(d.ledger()); bytes.Contains(b, []byte("two\\n")) || bytes.Contains(b, []byte(`"content":"two`)) {
		t.Fatal("write content reached the ledger")
	}
}

// oneDaemonManifest: a long command in a container with a view of
// workspace/src, a warm tool reading through its view, and a command
// that exits 137 by itself.
func oneDaemonManifest(t *testing.T) string {
	t.Helper()
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	return writeFile(t, fx.Base, "onedaemon.json", `{"schema_version":1,"tools":{
	  "sleeper":{"operation":"execute","mounts":["workspace/src"],"commands":[["sleep","600"]],"timeout_ms":120000,"pool":0},
	  "cat":{"operation":"execute","mounts":["workspace/src"],"commands":[["cat","a.py"]],"pool":1},
	  "exit137":{"operation":"execute","commands":[["sh","-c","echo bye; exit 137"]],"pool":0}}}`)
}

// runningSleeper is the pid of the live "sleep 600" in the run dir's
// cgroups, or 0.
func runningSleeper(runDir string) int {
	for _, l := range sandbox.Leftovers(runDir) {
		if p, ok := strings.CutPrefix(l, "process "); ok {
			if c, _ := os.ReadFile("/proc/" + p + "/cmdline"); string(c) == "sleep\x00600\x00" {
				pid, _ := strconv.Atoi(p)
				return pid
			}
		}
	}
	return 0
}

// waitSleeper polls until the sleeper runs in runDir and returns its pid.
func waitSleeper(t *testing.T, runDir string) int {
	t.Helper()
	var pid int
	if err := testutil.Poll(30*time.Second, func() error {
		if pid = runningSleeper(runDir); pid == 0 {
			return errors.New("no sleep 600 in the run dir's cgroups")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return pid
}

// viewMounts lists the views mounted in runDir's rootfs area.
func viewMounts(t *testing.T, runDir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	prefix := filepath.Join(runDir, "rootfs") + "/v"
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], prefix) {
			out = append(out, f[4])
		}
	}
	return out
}

// asyncCall runs a call in the background.
func asyncCall(c *client.Client, req api.CallRequest) <-chan *api.CallResult {
	ch := make(chan *api.CallResult, 1)
	go func() {
		res, err := c.Call(context.Background(), req)
		if err != nil {
			res = &api.CallResult{Reason: api.Reason("client: " + err.Error())}
		}
		ch <- res
	}()
	return ch
}

func waitResult(t *testing.T, ch <-chan *api.CallResult, what string) *api.CallResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: no result within 60 s", what)
	}
	return nil
}

// TestSecondDaemonChangesNothing: a second sluiced on the run dir, the
// state dir, or both of a running one is refused before it touches
// either: it exits non-zero naming the dir and the holder's pid, and the
// first daemon's running command, its views, its warm containers and its
// ledger are as they were; the command later ends by its task's cancel,
// and nothing is left behind.
// docs/security.md, "The second review (Hardening II)", "One daemon per run dir and state dir"
func TestSecondDaemonChangesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tc := range []struct {
		name          string
		runDir, state bool // shared with the first daemon
		want          string
	}{
		{"run and state dir", true, true, "run dir"},
		{"run dir", true, false, "run dir"},
		{"state dir", false, true, "state dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := oneDaemonManifest(t)
			a := startOwnDaemon(t, m)
			ctx := context.Background()
			if r, err := a.c.Call(ctx, api.CallRequest{Tool: "cat"}); err != nil || !r.OK || r.Output == nil || !strings.Contains(*r.Output, "hello") {
				t.Fatalf("cat before: %v %+v", err, r)
			}
			sleeper := asyncCall(a.c, api.CallRequest{Tool: "sleeper", Task: "t1"})
			pid := waitSleeper(t, a.runDir)
			views := viewMounts(t, a.runDir)
			if len(views) != 2 {
				t.Fatalf("want the two tools' views mounted, got %v", views)
			}
			ledger, _ := os.ReadFile(a.ledger())

			dir := t.TempDir()
			bRun, bState := filepath.Join(dir, "run"), filepath.Join(dir, "state")
			if tc.runDir {
				bRun = a.runDir
			}
			if tc.state {
				bState = a.stateDir
			}
			bSock := filepath.Join(dir, "b.sock")
			b := exec.Command(filepath.Join(binDir, "sluiced"), "--manifest", m, "--socket", bSock,
				"--state-dir", bState, "--run-dir", bRun)
			out := &testutil.LockedBuffer{}
			b.Stdout, b.Stderr = out, out
			if err := b.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- b.Wait() }()
			bc := client.New(bSock)
			defer bc.Close()
			var berr error
			gone := false
			// The event is the second daemon's exit, or (the bug) its
			// serving.
			if err := testutil.Poll(30*time.Second, func() error {
				select {
				case berr = <-exited:
					gone = true
					return nil
				default:
				}
				if _, err := bc.Health(ctx); err == nil {
					return nil
				}
				return errors.New("the second daemon neither exited nor served")
			}); err != nil {
				b.Process.Kill()
				<-exited
				t.Fatal(err)
			}
			if !gone {
				b.Process.Signal(syscall.SIGTERM)
				<-exited
				t.Errorf("the second daemon started and served:\n%s", out)
			} else {
				var ee *exec.ExitError
				if !errors.As(berr, &ee) || ee.ExitCode() == 0 {
					t.Errorf("the second daemon exited %v, want non-zero", berr)
				}
				wantDir := a.runDir
				if tc.want == "state dir" {
					wantDir = a.stateDir
				}
				msg := out.String()
				t.Logf("refused: %s", msg)
				if !strings.Contains(msg, tc.want+" "+wantDir) || !strings.Contains(msg, "in use by another daemon") ||
					!strings.Contains(msg, fmt.Sprintf("pid %d", a.cmd.Process.Pid)) {
					t.Errorf("the refusal does not name the %s and the holder (pid %d):\n%s", tc.want, a.cmd.Process.Pid, msg)
				}
			}
			if exists(bSock) {
				t.Error("the refused daemon left a socket")
			}

			// The first daemon is untouched.
			if got := runningSleeper(a.runDir); got != pid {
				t.Errorf("the first daemon's command (pid %d) is gone (now %d)", pid, got)
			}
			if got := viewMounts(t, a.runDir); strings.Join(got, " ") != strings.Join(views, " ") {
				t.Errorf("views %v, were %v", got, views)
			}
			if l, _ := os.ReadFile(a.ledger()); !bytes.Equal(l, ledger) {
				t.Errorf("the first daemon's ledger changed:\n%s", l[min(len(ledger), len(l)):])
			}
			if r, err := a.c.Call(ctx, api.CallRequest{Tool: "cat"}); err != nil || !r.OK || r.Output == nil || !strings.Contains(*r.Output, "hello") {
				t.Errorf("cat after the second daemon: %v %+v\n%s", err, r, a.logs)
			}
			// The command ends as its task is cancelled, and says so.
			if _, err := a.c.CancelTask(ctx, "t1"); err != nil {
				t.Fatal(err)
			}
			if r := waitResult(t, sleeper, "sleeper"); r.Reason != api.ReasonTaskCancelled || r.OK {
				t.Errorf("sleeper: %+v, want task_cancelled", r)
			}
			a.stop()
			if left := sandbox.Leftovers(a.runDir); len(left) > 0 {
				t.Errorf("left behind in the run dir: %v", left)
			}
			if !tc.runDir {
				if left := sandbox.Leftovers(bRun); len(left) > 0 {
					t.Errorf("left behind in the second daemon's run dir: %v", left)
				}
			}
			if out, _, code := sluice(t, "", "audit", "verify", a.ledger()); code != 0 {
				t.Errorf("audit verify: %s", out)
			}
		})
	}
}

// TestStaleSocketCheckLocked: the stale-socket check (dial, then remove)
// is made under the lock beside the socket, so two daemons starting on
// one stale socket cannot both take it over, the later one removing the
// earlier one's live socket. With the lock held elsewhere, a daemon
// leaves the (dead) socket file alone and exits naming the holder.
// docs/security.md, "The second review (Hardening II)", "One daemon per run dir and state dir"
func TestStaleSocketCheckLocked(t *testing.T) {
	testutil.RequireRoot(t)
	m := oneDaemonManifest(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // a dead daemon's socket
	before, _ := os.Stat(sock)
	lock, err := os.OpenFile(sock+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	lock.WriteString("4321\n") // another daemon, mid-start
	cmd := exec.Command(filepath.Join(binDir, "sluiced"), "--manifest", m, "--socket", sock,
		"--state-dir", filepath.Join(dir, "state"), "--run-dir", filepath.Join(dir, "run"))
	out := &testutil.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c := client.New(sock)
	defer c.Close()
	var exitErr error
	gone := false
	if err := testutil.Poll(30*time.Second, func() error {
		select {
		case exitErr = <-exited:
			gone = true
			return nil
		default:
		}
		if _, err := c.Health(context.Background()); err == nil {
			return nil
		}
		return errors.New("the daemon neither exited nor served")
	}); err != nil {
		cmd.Process.Kill()
		<-exited
		t.Fatal(err)
	}
	if !gone {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		t.Fatalf("the daemon took over a socket whose lock another holds:\n%s", out)
	}
	if exitErr == nil || !strings.Contains(out.String(), "socket "+sock+" is in use by another daemon (pid 4321") {
		t.Errorf("exit %v, want non-zero naming the socket and pid 4321:\n%s", exitErr, out)
	}
	if after, err := os.Stat(sock); err != nil || !os.SameFile(before, after) {
		t.Errorf("the socket file was removed or replaced: %v", err)
	}
}
