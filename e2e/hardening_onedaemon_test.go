//go:build linux

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
)

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
			out := &syncBuffer{}
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
	out := &syncBuffer{}
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
