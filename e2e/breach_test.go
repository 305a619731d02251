//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestBreachClassesBlackBox runs variants of issue 7's classes against the
// real binary: host rewrites after the pool filled, a socket served and a
// FIFO read in the workspace, other socket families, and nested mounts.
func TestBreachClassesBlackBox(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	bin, err := os.ReadFile(testutil.Probe(t))
	testutil.Must(t, err)
	tests := filepath.Join(fx.Base, "workspace/tests")
	src := filepath.Join(fx.Base, "workspace/src")
	testutil.Must(t, os.WriteFile(filepath.Join(tests, "probe"), bin, 0o755))
	m := writeFile(t, fx.Base, "breach.json", `{"schema_version":1,"tools":{
	  "look":{"operation":"execute","mounts":["workspace/src","workspace/tests"],"cwd":"workspace/tests","pool":2,
	    "never":[".env","*.pem","private/**"],
	    "commands":[["sh","-c","cat ../src/.env ../src/conf/.env ../src/private/keys.txt ../src/x/y/z/w/v/k.pem 2>&1; ls -A ../src ../src/private ../src/x/y/z/w/v 2>&1; ./probe connect-unix ../src/agent.sock; ./probe write-fifo ../src/pipe; ./probe vsock; ./probe uevent; echo end"]]}}}`)
	d := startDaemon(t, m)
	if err := testutil.Poll(30*time.Second, func() error {
		if n := d.containers(); n < 2 {
			return fmt.Errorf("%d of 2 containers", n)
		}
		return nil
	}); err != nil {
		t.Fatalf("the pool never filled: %v\n%s", err, d.logs)
	}
	// After the pool filled: an editor's save of .env, a new .env in a
	// new directory, private/ replaced by a copy, a key at depth 5, a
	// socket a host service listens on, a FIFO a host process reads.
	secret := func(p string) {
		testutil.Must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		if err := os.WriteFile(p, []byte(escapetest.Secret+" "+p+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	secret(filepath.Join(src, ".env~"))
	testutil.Must(t, os.Rename(filepath.Join(src, ".env~"), filepath.Join(src, ".env")))
	secret(filepath.Join(src, "conf/.env"))
	testutil.Must(t, os.Rename(filepath.Join(src, "private"), filepath.Join(src, "private.bak")))
	if out, err := exec.Command("cp", "-a", filepath.Join(src, "private.bak"), filepath.Join(src, "private")).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, out)
	}
	secret(filepath.Join(src, "x/y/z/w/v/k.pem"))
	ln, err := net.Listen("unix", filepath.Join(src, "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	testutil.Must(t, os.Chmod(filepath.Join(src, "agent.sock"), 0o777))
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	testutil.Must(t, unix.Mkfifo(filepath.Join(src, "pipe"), 0o666))
	rfd, err := unix.Open(filepath.Join(src, "pipe"), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd)

	res, err := d.c.Call(context.Background(), api.CallRequest{Tool: "look", Args: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	out := res.Stderr
	if res.Output != nil {
		out = *res.Output + out
	}
	if res.Reason != api.ReasonAllowed || !strings.Contains(out, "end") {
		t.Fatalf("%s: %q", res.Reason, out)
	}
	if strings.Contains(out, escapetest.Secret) || strings.Contains(out, "ESCAPED") {
		t.Fatalf("got through:\n%s", out)
	}
	for _, want := range []string{"blocked:connect-unix:2:", "blocked:write-fifo:2:", "blocked:vsock:97:", "blocked:uevent:97:", "private.bak"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if accepted.Load() > 0 {
		t.Error("a container connected to a host socket in the workspace")
	}
	if n, _ := unix.Read(rfd, make([]byte, 16)); n > 0 {
		t.Error("a container wrote into a host FIFO in the workspace")
	}
	d.stop()
	if left := d.leftovers(); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}

	// Nested mounts never load.
	testutil.Must(t, os.WriteFile(filepath.Join(fx.Base, "workspace/cfg.txt"), []byte("x"), 0o644))
	bad := writeFile(t, fx.Base, "nested.json", `{"schema_version":1,"tools":{"t":{"operation":"execute","commands":[["true"]],"mounts":["workspace","workspace/cfg.txt"]}}}`)
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(binDir, "sluiced"), "--manifest", bad, "--socket", filepath.Join(dir, "s"), "--state-dir", dir, "--run-dir", filepath.Join(dir, "run"))
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "overlaps") {
		t.Fatalf("nested mounts: %v %s", err, b)
	}
}
