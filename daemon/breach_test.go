//go:build linux

package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
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
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
)

// leakScript runs inside a container with cwd workspace/tests. It says
// "ready", waits until the host creates tests/go (seen through the view
// at once: failed lookups are not cached), then tries every never-listed
// path the host rewrote, the sockets and the FIFOs. The test fails on any
// secret byte or ESCAPED marker in its output.
const leakScript = `echo ready
i=0; while [ ! -e go ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done
[ -e go ] || echo "never saw go"
for f in ../src/.env ../src/sub/.env ../src/private/keys.txt ../src/a/b/c/d/e/new.pem ../src/id.pem ../src/env_link ../src/keys_link; do
  cat "$f" 2>/dev/null
done
ls -A ../src/private ../src/a/b/c/d/e 2>&1
for s in ../src/sock ../src/sock2; do ./probe connect-unix "$s"; done
for p in ../src/fifo ../src/fifo2; do ./probe write-fifo "$p"; done
echo done
`

// hostEdits does to the workspace what editors, git and people do, after
// the tool's containers exist: rewrite .env by rename (sed -i), replace
// the private directory by a copy (mv + cp -a), create a *.pem at depth
// 5, serve a new unix socket and open a new FIFO for reading. It returns
// a check that no socket was connected to and nothing reached a FIFO.
func hostEdits(t *testing.T, src string) (check func()) {
	t.Helper()
	secret := func(p string) {
		if err := os.WriteFile(p, []byte(escapetest.Secret+" "+filepath.Base(p)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	secret(filepath.Join(src, ".env.sedtmp"))
	if err := os.Rename(filepath.Join(src, ".env.sedtmp"), filepath.Join(src, ".env")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(src, "private"), filepath.Join(src, "private.old")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", filepath.Join(src, "private.old"), filepath.Join(src, "private")).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, out)
	}
	testutil.Must(t, os.MkdirAll(filepath.Join(src, "a/b/c/d/e"), 0o755))
	secret(filepath.Join(src, "a/b/c/d/e/new.pem"))
	var accepted atomic.Int32
	ln, err := net.Listen("unix", filepath.Join(src, "sock2"))
	if err != nil {
		t.Fatal(err)
	}
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
	if err := unix.Mkfifo(filepath.Join(src, "fifo2"), 0o666); err != nil {
		t.Fatal(err)
	}
	var readers []int
	for _, name := range []string{"fifo", "fifo2"} {
		fd, err := unix.Open(filepath.Join(src, name), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, fd)
	}
	testutil.Must(t, os.Chmod(filepath.Join(src, "sock"), 0o777))
	testutil.Must(t, os.Chmod(filepath.Join(src, "sock2"), 0o777))
	return func() {
		t.Helper()
		ln.Close()
		if n := accepted.Load(); n > 0 {
			t.Errorf("a container connected to a host unix socket in the workspace (%d times)", n)
		}
		for _, fd := range readers {
			buf := make([]byte, 64)
			if n, _ := unix.Read(fd, buf); n > 0 {
				t.Errorf("a container wrote %q into a host FIFO in the workspace", buf[:n])
			}
			unix.Close(fd)
		}
	}
}

// TestHostEditsNeverUnmask is issue 7's classes 1 and 5 over the socket:
// whatever the host does to the workspace before or during a call, pooled
// or cold, a command sees no never-listed entry, socket or FIFO.
func TestHostEditsNeverUnmask(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pool   int
		during bool
	}{{"pooled/before", 2, false}, {"pooled/during", 2, true}, {"cold/before", 0, false}, {"cold/during", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			testutil.RequireRoot(t)
			fx := escapetest.Build(t)
			testutil.Must(t, os.Chmod(fx.Base, 0o755))
			bin, err := os.ReadFile(testutil.Probe(t))
			testutil.Must(t, err)
			tests := filepath.Join(fx.Base, "workspace/tests")
			testutil.Must(t, os.WriteFile(filepath.Join(tests, "probe"), bin, 0o755))
			testutil.Must(t, os.WriteFile(filepath.Join(tests, "leak.sh"), []byte(leakScript), 0o755))
			pool := "0"
			if tc.pool > 0 {
				pool = "2"
			}
			m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{"leak":{"operation":"execute",
			  "commands":[["sh","leak.sh"]],"mounts":["workspace/src","workspace/tests"],"cwd":"workspace/tests",
			  "pool":`+pool+`,"timeout_ms":20000,"never":[".env","*.pem","private/**"]}}}`)
			runDir := t.TempDir()
			t.Cleanup(func() {
				if left := sandbox.Leftovers(runDir); len(left) > 0 {
					t.Errorf("left behind: %v", left)
				}
			})
			h := start(t, m, securefs.ModeAuto, func(c *Config) { c.RunDir = runDir })
			if tc.pool > 0 {
				waitFor(t, "the pool to fill", func() bool { return sandbox.Containers(runDir) >= tc.pool })
			}
			src := filepath.Join(fx.Base, "workspace/src")
			var check func()
			if !tc.during {
				check = hostEdits(t, src)
				testutil.Must(t, os.WriteFile(filepath.Join(tests, "go"), nil, 0o644))
			}
			var out strings.Builder
			res, err := h.c.Stream(context.Background(), api.CallRequest{Tool: "leak"}, func(ev api.Event) error {
				if ev.Event != api.EventOutput {
					return nil
				}
				out.WriteString(ev.Data)
				if tc.during && strings.Contains(out.String(), "ready\n") && check == nil {
					// The command runs: now the host edits, then lets it look.
					check = hostEdits(t, src)
					testutil.Must(t, os.WriteFile(filepath.Join(tests, "go"), nil, 0o644))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if check == nil {
				t.Fatalf("the command never said ready: %q", out.String())
			}
			check()
			got := out.String()
			t.Logf("%s", got)
			if res.Reason != api.ReasonAllowed || !strings.Contains(got, "done") || strings.Contains(got, "never saw go") {
				t.Fatalf("leak.sh: %s ok=%v: %q", res.Reason, res.OK, got)
			}
			if strings.Contains(got, escapetest.Secret) || strings.Contains(got, "ESCAPED") {
				t.Fatalf("a never-listed entry, socket or FIFO got through:\n%s", got)
			}
			// What the view does show: the renamed copy (file tools would
			// allow it too) and the new directories.
			if !strings.Contains(got, "blocked:connect-unix:2:") || !strings.Contains(got, "blocked:write-fifo:2:") {
				t.Errorf("sockets and FIFOs should not exist in the view:\n%s", got)
			}
		})
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := testutil.Poll(30*time.Second, func() error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	}); err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestMountSetupNeverFollowsWorkspace is issue 7's classes 2 and 3: while
// pools refill, the workspace swaps a directory for a symlink to outside
// in a loop (RENAME_EXCHANGE). Nothing outside may be created, changed or
// mounted on, and no mount of ours may appear in the host's namespace
// outside the run dir.
func TestMountSetupNeverFollowsWorkspace(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	outside := filepath.Join(fx.Base, "outside")
	testutil.Must(t, os.MkdirAll(filepath.Join(outside, "sub"), 0o755))
	victim := filepath.Join(outside, "victim.txt")
	testutil.Must(t, os.WriteFile(victim, []byte("keep me\n"), 0o644))
	src := filepath.Join(fx.Base, "workspace/src")
	testutil.Must(t, os.MkdirAll(filepath.Join(src, "private/inner"), 0o755))
	testutil.Must(t, os.Symlink(filepath.Join(outside, "sub"), filepath.Join(src, "swap_link")))
	m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{"cat":{"operation":"execute",
	  "commands":[["sh","-c","ls -R `+src+` >/dev/null 2>&1; echo ok"]],"mounts":["workspace/src","workspace/tests"],
	  "cwd":"/tmp","pool":3,"never":[".env","*.pem","private/**"]}}}`)
	before := hostMounts(t)
	runDir := t.TempDir()
	t.Cleanup(func() {
		if left := sandbox.Leftovers(runDir); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.RunDir = runDir })
	sw := testutil.Swap(t, func(int) error { // private <-> swap_link, as fast as it goes
		return unix.Renameat2(unix.AT_FDCWD, filepath.Join(src, "private"), unix.AT_FDCWD, filepath.Join(src, "swap_link"), unix.RENAME_EXCHANGE)
	})
	for i := 0; i < 10; i++ {
		res, body := h.call("cat", map[string]any{})
		if res.Reason != api.ReasonAllowed {
			t.Errorf("call %d: %s", i, body)
		}
		if extra := newMounts(before, hostMounts(t), fx.Base); len(extra) > 0 {
			mi, _ := os.ReadFile("/proc/self/mountinfo")
			t.Fatalf("mounts appeared outside the run dir: %v\n%s", extra, mi)
		}
	}
	if swapErr := sw.Stop(); swapErr != nil || sw.Swaps() == 0 {
		t.Fatalf("the swap loop did not run: %d swaps, %v", sw.Swaps(), swapErr)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep me\n" {
		t.Fatalf("a file outside the mounts changed: %q", b)
	}
	ents, err := os.ReadDir(filepath.Join(outside, "sub"))
	testutil.Must(t, err)
	if len(ents) != 0 {
		t.Fatalf("something was created outside the mounts: %v", ents)
	}
	if extra := newMounts(before, hostMounts(t), fx.Base); len(extra) > 0 {
		t.Fatalf("mounts appeared outside the run dir: %v", extra)
	}
}

func hostMounts(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			out[f[4]] = true
		}
	}
	return out
}

// newMounts lists mount points in after but not before that lie in the
// fixture: nothing sluiced mounts may ever sit on the workspace or beside it.
func newMounts(before, after map[string]bool, fixture string) []string {
	var out []string
	for mp := range after {
		if !before[mp] && strings.HasPrefix(mp, fixture+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// TestOverlappingMountsRefused: a mount inside another is refused at load,
// naming both (the premount of one through the other's contents was how a
// workspace symlink made root truncate a host file).
func TestOverlappingMountsRefused(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.WriteFile(filepath.Join(fx.Base, "workspace/cfg.txt"), []byte("x"), 0o644))
	for _, mounts := range []string{`["workspace","workspace/cfg.txt"]`, `["workspace/src","workspace"]`, `["workspace/src","workspace/src/"]`} {
		m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{"t":{"operation":"execute","commands":[["true"]],"mounts":`+mounts+`,"pool":0}}}`)
		dir := t.TempDir()
		err := Run(context.Background(), Config{Manifest: m, Socket: filepath.Join(dir, "s"), StateDir: dir, RunDir: filepath.Join(dir, "run"),
			Helper: testutil.Helper(t), Logger: testLogger()})
		if err == nil || !strings.Contains(err.Error(), "overlaps") || !strings.Contains(err.Error(), "mounts[0]") || !strings.Contains(err.Error(), "mounts[1]") {
			t.Errorf("mounts %s: %v, want an overlap error naming both", mounts, err)
		}
	}
}

func testLogger() *slog.Logger { return slog.New(slog.NewJSONHandler(io.Discard, nil)) }

// TestBreachViewStaleMode (review 3): a workspace file the host makes
// unreadable to others (chmod 600) is not readable by the next command,
// though the kernel cached the view's attributes of it (mode 644) for 10
// minutes and the chmod went through a hard link outside the workspace,
// which inotify reports to no watched directory. Before the view checked
// each open against the mode it resolves, the command read it. (The tool
// allows hard links: with never globs, a file with a second name is
// refused outright, TestHardLinksUnderNever.)
func TestBreachViewStaleMode(t *testing.T) {
	fx, m := viewsFixture(t, map[string]string{"cat": `"commands":[["cat","note.txt"]],"pool":1,"hard_links":"allow"`})
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.UIDRange = viewsUIDs })
	cat := func() (*api.CallResult, string) {
		t.Helper()
		res, body := h.call("cat", map[string]any{})
		if res.Reason != api.ReasonAllowed {
			t.Fatalf("cat: %s", body)
		}
		return res, callOutput(res)
	}
	if res, out := cat(); !res.OK || !strings.Contains(out, viewContent) {
		t.Fatalf("before: %q", out)
	}
	link := filepath.Join(fx.Base, "note-link")
	testutil.Must(t, os.Link(filepath.Join(fx.Base, "workspace/src/note.txt"), link))
	testutil.Must(t, os.Chmod(link, 0o600))
	if res, out := cat(); res.OK || strings.Contains(out, viewContent) {
		t.Errorf("after chmod 600 through a hard link: the command read %q", out)
	}
	testutil.Must(t, os.Chmod(link, 0o644))
	if res, out := cat(); !res.OK || !strings.Contains(out, viewContent) {
		t.Errorf("after chmod 644 again: %q", out)
	}
}
