//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestSocketActivation starts the real sluiced the way systemd does: the
// listening socket as fd 3 with LISTEN_PID and LISTEN_FDS (sh sets
// LISTEN_PID to its own pid, then execs sluiced in its place), and
// NOTIFY_SOCKET. sluiced serves the passed socket, not --socket; peer
// credentials still identify the caller; READY=1 and STOPPING=1 arrive;
// and the socket file, which systemd owns, outlives the daemon.
func TestSocketActivation(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "activated.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false) // as systemd's: the file stays when a holder closes
	defer l.Close()
	lf, err := l.File()
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	notifyPath, msgs := testutil.NotifySocket(t)
	await := func(want string) string {
		t.Helper()
		return testutil.AwaitNotify(t, msgs, want, "")
	}

	unused := filepath.Join(dir, "unused.sock")
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=sluiced.socket exec "$0" "$@"`,
		filepath.Join(binDir, "sluiced"), "--manifest", fx.Manifest, "--socket", unused,
		"--state-dir", filepath.Join(dir, "state"), "--run-dir", filepath.Join(dir, "run"))
	cmd.ExtraFiles = []*os.File{lf} // fd 3
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notifyPath)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	lf.Close()
	l.Close() // ours: the daemon holds its own copy of the socket now

	if r := await("READY=1"); !strings.Contains(r, "STATUS=policy ") {
		t.Errorf("READY=1 without a status: %q", r)
	}
	c := client.New(sock)
	defer c.Close()
	// Without peer credentials every request is refused: an answer shows
	// SO_PEERCRED is read through the passed socket too.
	if _, err := c.Health(context.Background()); err != nil {
		t.Fatalf("health over the activated socket: %v\n%s", err, stderr.String())
	}
	res, err := c.Call(context.Background(), api.CallRequest{Tool: "read_file", Args: json.RawMessage(`{"path":"workspace/src/a.py"}`)})
	if err != nil || !res.OK {
		t.Fatalf("read over the activated socket: %+v %v", res, err)
	}
	if _, err := os.Lstat(unused); err == nil {
		t.Error("sluiced bound --socket although systemd passed one")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	await("STOPPING=1")
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("sluiced: %v\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("sluiced did not stop")
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the activated socket file went with the daemon (systemd owns it): %v", err)
	}
	led, err := os.ReadFile(filepath.Join(dir, "state", "audit.jsonl"))
	testutil.Must(t, err)
	if want := fmt.Sprintf(`"pid":%d,"uid":0`, os.Getpid()); !bytes.Contains(led, []byte(want)) {
		t.Errorf("the ledger lacks the kernel-attested principal %s", want)
	}
}
