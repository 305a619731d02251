package fsview

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// asFsuid runs fn on a thread of its own whose fs uid (what FUSE reports
// as the caller) is uid; the thread is dropped afterwards.
func asFsuid(uid int, fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with its odd fsuid
		unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
		fn()
	}()
	<-done
}

func mountCapped(t *testing.T, max int) (ws string, v *View) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("fsview tests mount FUSE: run as root (CI does)")
	}
	base := t.TempDir()
	for d := base; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755) // the caller must reach the mount point
	}
	ws, mnt := filepath.Join(base, "ws"), filepath.Join(base, "mnt")
	for _, d := range []string{ws, mnt, filepath.Join(ws, "d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(ws, "f"), "content\n")
	for _, p := range []string{ws, filepath.Join(ws, "d")} {
		os.Chmod(p, 0o755) // whatever the umask: the kernel checks the caller against these
	}
	os.Chmod(filepath.Join(ws, "f"), 0o644)
	root, err := securefs.OpenRoot(ws, securefs.ModeAuto)
	if err != nil {
		t.Fatal(err)
	}
	v, err = Mount(mnt, []Source{{Root: root}}, Options{Hide: never, MaxOpen: max})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		v.Close()
		select {
		case <-v.Done():
		case <-time.After(10 * time.Second):
			t.Error("view server did not stop after Close")
		}
	})
	return ws, v
}

// TestCallers: a uid the view did not admit gets EACCES on lookup, stat,
// open, opendir and statfs; an admitted one holds at most MaxOpen files
// and directories (EMFILE beyond, room again once one is closed); once
// revoked it is refused again. Root is always served.
func TestCallers(t *testing.T) {
	_, v := mountCapped(t, 8)
	const uid = 0x7F030000
	f, d := v.Path(0)+"/f", v.Path(0)+"/d"
	probe := func() (errs []error) {
		_, err := os.Lstat(f)
		errs = append(errs, err)
		fd, err := unix.Open(f, unix.O_RDONLY, 0)
		if err == nil {
			unix.Close(fd)
		}
		errs = append(errs, err)
		dfd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err == nil {
			unix.Close(dfd)
		}
		errs = append(errs, err)
		var st unix.Statfs_t
		errs = append(errs, unix.Statfs(v.Path(0), &st))
		return errs
	}
	asFsuid(uid, func() {
		for i, err := range probe() {
			if err == nil || !os.IsPermission(err) {
				t.Errorf("not admitted, probe %d: %v, want EACCES", i, err)
			}
		}
	})
	v.Admit(uid)
	asFsuid(uid, func() {
		for i, err := range probe() {
			if err != nil {
				t.Errorf("admitted, probe %d: %v", i, err)
			}
		}
		// The probes' closes reach the view after close returns (the
		// kernel's RELEASE is asynchronous): wait until none is held.
		if err := testutil.Poll(5*time.Second, func() error {
			v.mu.RLock()
			n := v.uids[uid].open.Load()
			v.mu.RUnlock()
			if n != 0 {
				return fmt.Errorf("the probes' %d opens not yet released", n)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var fds []int
		var last error
		for len(fds) < 100 {
			p := f
			if len(fds)%2 == 1 {
				p = d // directories count too
			}
			fd, err := unix.Open(p, unix.O_RDONLY, 0)
			if err != nil {
				last = err
				break
			}
			fds = append(fds, fd)
		}
		if len(fds) != 8 || last != syscall.EMFILE {
			t.Errorf("admitted uid held %d open (then %v), want 8 then EMFILE", len(fds), last)
		}
		unix.Close(fds[0])
		// The release reaches the view after close returns.
		err := testutil.Poll(5*time.Second, func() error {
			fd, err := unix.Open(f, unix.O_RDONLY, 0)
			if err == nil {
				unix.Close(fd)
			}
			return err
		})
		if err != nil {
			t.Errorf("after a close: %v", err)
		}
		for _, fd := range fds[1:] {
			unix.Close(fd)
		}
	})
	v.Revoke(uid)
	asFsuid(uid, func() {
		if _, err := os.ReadFile(f); !os.IsPermission(err) {
			t.Errorf("revoked: %v, want EACCES", err)
		}
	})
	if b, err := os.ReadFile(f); err != nil || string(b) != "content\n" {
		t.Errorf("root: %q %v", b, err)
	}
}

// TestReaddirChunks: a directory bigger than one getdents chunk lists
// whole, hidden names left out, and again after a rewind on the same fd.
func TestReaddirChunks(t *testing.T) {
	ws, v := mountCapped(t, 8)
	var want []string
	for i := range 3000 {
		name := fmt.Sprintf("entry-%05d-%s", i, "padding-padding-padding")
		write(t, filepath.Join(ws, "d", name), "")
		want = append(want, name)
	}
	write(t, filepath.Join(ws, "d", "k.pem"), "SECRET")
	write(t, filepath.Join(ws, "d", ".env"), "SECRET")
	dir, err := os.Open(v.Path(0) + "/d")
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	for pass := range 2 {
		names, err := dir.Readdirnames(-1)
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(names)
		if fmt.Sprint(names) != fmt.Sprint(want) {
			t.Errorf("pass %d: %d names (first %q), want %d", pass, len(names), names[:min(3, len(names))], len(want))
		}
		if _, err := dir.Seek(0, 0); err != nil {
			t.Fatal(err)
		}
	}
}
