//go:build linux

package sandbox

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/exeseal"

	"github.com/sluicehq/sluice/internal/testutil"
)

func sha256File(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// builtInit is the sluice-init that newRunner's runners use.
func builtInit(t *testing.T) string {
	return filepath.Join(filepath.Dir(testutil.Helper(t)), InitName)
}

// A container's init process is the sealed copy of sluice-init, by what
// the kernel says it runs (/proc/PID/exe: its name and its bytes), not
// the test binary libcontainer re-executes; and the container holds no fd
// of it (fd 3 is /dev/null).
func TestInitIsSluiceInit(t *testing.T) {
	r := newRunner(t)
	want := sha256File(t, builtInit(t))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if sha256File(t, self) == want {
		t.Fatal("the test binary is sluice-init?")
	}
	var exe, fd3 string
	var sum [32]byte
	r.start = func(c *libcontainer.Container, p *libcontainer.Process) error {
		if err := c.Start(p); err != nil {
			return err
		}
		// The init now waits on libcontainer's exec fifo, set up.
		pid, err := p.Pid()
		if err != nil {
			return err
		}
		proc := "/proc/" + strconv.Itoa(pid)
		exe, _ = os.Readlink(proc + "/exe")
		fd3, _ = os.Readlink(proc + "/fd/3")
		sum = sha256File(t, proc+"/exe")
		return c.Exec()
	}
	b, err := r.Create(defaultSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Exec(context.Background(), []string{"/bin/true"}, 4096, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	if !strings.Contains(exe, "memfd:runc_cloned:"+InitName) || sum != want {
		t.Errorf("the container's init runs %q (sha256 %x), want the sealed %s (sha256 %x)", exe, sum[:8], InitName, want[:8])
	}
	if fd3 != "/dev/null" {
		t.Errorf("fd 3 of the container's init is %q, want /dev/null", fd3)
	}
}

// An init binary that someone other than root could change is refused at
// start, with the reason named: it would run as root in every container.
// So are one that is missing and one that is not sluice-init.
func TestInitRefused(t *testing.T) {
	testutil.RequireRoot(t)
	good := builtInit(t)
	helper := testutil.Helper(t)
	cp := func(t *testing.T, src, dst string, mode os.FileMode) {
		t.Helper()
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dst, mode); err != nil { // not umask's
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns the path to configure
		want  string                                // in the error; "" accepted
	}{
		{"root 0755", func(t *testing.T, dir string) string {
			cp(t, good, dir+"/i", 0o755)
			return dir + "/i"
		}, ""},
		{"symlink to root 0755", func(t *testing.T, dir string) string {
			cp(t, good, dir+"/i", 0o755)
			os.Symlink("i", dir+"/link")
			return dir + "/link"
		}, ""},
		{"missing", func(t *testing.T, dir string) string { return dir + "/none" }, "no such file"},
		{"group-writable", func(t *testing.T, dir string) string {
			cp(t, good, dir+"/i", 0o775)
			return dir + "/i"
		}, "writable by group or others"},
		{"world-writable", func(t *testing.T, dir string) string {
			cp(t, good, dir+"/i", 0o757)
			return dir + "/i"
		}, "writable by group or others"},
		{"not root's", func(t *testing.T, dir string) string {
			cp(t, good, dir+"/i", 0o755)
			os.Chown(dir+"/i", 65534, 65534)
			return dir + "/i"
		}, "owned by uid 65534, not root"},
		{"in a dir others may write", func(t *testing.T, dir string) string {
			os.Mkdir(dir+"/w", 0o777)
			os.Chmod(dir+"/w", 0o777)
			cp(t, good, dir+"/w/i", 0o755)
			return dir + "/w/i"
		}, "is writable by group or others"},
		{"in a dir not root's", func(t *testing.T, dir string) string {
			os.Mkdir(dir+"/u", 0o755)
			os.Chown(dir+"/u", 65534, 65534)
			cp(t, good, dir+"/u/i", 0o755)
			return dir + "/u/i"
		}, "is owned by uid 65534, not root"},
		{"not executable", func(t *testing.T, dir string) string {
			cp(t, good, dir+"/i", 0o644)
			return dir + "/i"
		}, "not executable"},
		{"a directory", func(t *testing.T, dir string) string {
			os.Mkdir(dir+"/d", 0o755)
			return dir + "/d"
		}, "not a regular file"},
		{"not sluice-init", func(t *testing.T, dir string) string {
			cp(t, helper, dir+"/i", 0o755)
			return dir + "/i"
		}, "not sluice-init"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.setup(t, t.TempDir())
			r, err := NewRunnerWith(t.TempDir(), helper, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Init: path})
			if r != nil {
				r.Close()
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !errors.Is(err, ErrInitBinary) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an ErrInitBinary naming %q", err, tc.want)
			}
		})
	}
}

// The binary that creates containers is never their init: started as one
// (as libcontainer starts it), it runs what the sealed memfd at fd 3
// holds, and without one it exits 1 before any Go code runs.
func TestDaemonBinaryNeverInit(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(fd3 *os.File) (string, error) {
		// Not an assertion on time: without the handoff this would
		// run the whole test binary again, recursively.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, self, "init")
		cmd.Env = []string{"_LIBCONTAINER_INITPIPE=4"}
		cmd.ExtraFiles = []*os.File{fd3}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	plain, err := os.Open("/bin/echo")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	out, err := run(plain)
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, "fd 3 is not the sealed sluice-init") {
		t.Fatalf("with fd 3 a plain file: %v %q", err, out)
	}

	sealed, err := exeseal.CloneBinary(plain, mustSize(t, plain), "echo", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer sealed.Close()
	if out, err := run(sealed); err != nil || out != "init\n" {
		t.Fatalf("with fd 3 a sealed echo: %v %q, want it run as [sluice-init init]", err, out)
	}
}

func mustSize(t *testing.T, f *os.File) int64 {
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
