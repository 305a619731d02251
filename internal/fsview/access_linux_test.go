package fsview

import (
	"fmt"
	"os"
	"os/exec"
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

// Review 3: attacks on the view's long kernel caches.

// openAs opens p for reading as uid (fs uid; no capabilities) and reads
// it; it returns what it read or the error.
func openAs(uid int, p string) (string, error) {
	var got string
	var err error
	asFsuid(uid, func() {
		var b []byte
		b, err = os.ReadFile(p)
		got = string(b)
	})
	return got, err
}

// TestBreachStaleModeOpens: the kernel checks a container's open against
// the attributes it caches (default_permissions), for up to the 10 minute
// cache timeout in a watched directory. A file the host makes unreadable
// to others must not open for a container, whether the change was
// reported (a chmod in the view, read by the watch a moment later: here
// the watcher is held, as it is while the event waits in the queue) or
// not (a chmod through a hard link outside the view: inotify reports it
// to no watched directory).
func TestBreachStaleModeOpens(t *testing.T) {
	ws, v := mountCapped(t, 8)
	const uid = 0x7F030001
	v.Admit(uid)
	f := filepath.Join(v.Path(0), "f")
	link := filepath.Join(filepath.Dir(ws), "link-outside")
	testutil.Must(t, os.Link(filepath.Join(ws, "f"), link))

	if got, err := openAs(uid, f); err != nil || got != "content\n" {
		t.Fatalf("before: %q %v", got, err)
	}
	// Through the hard link outside the view: no event at all.
	testutil.Must(t, os.Chmod(link, 0o600))
	v.Sync()
	if got, err := openAs(uid, f); err == nil {
		t.Errorf("chmod 600 through a hard link outside the view: the container still read %q", got)
	}

	// In the view, while the event waits.
	testutil.Must(t, os.Chmod(link, 0o644))
	v.Sync()
	if got, err := openAs(uid, f); err != nil || got != "content\n" {
		t.Fatalf("after chmod 644 and Sync: %q %v", got, err)
	}
	v.w.mu.Lock()
	testutil.Must(t, os.Chmod(filepath.Join(ws, "f"), 0o600))
	got, err := openAs(uid, f)
	v.w.mu.Unlock()
	if err == nil {
		t.Errorf("chmod 600 in the view, event not yet read: the container read %q", got)
	}
	v.Sync()
	if got, err := openAs(uid, f); err == nil {
		t.Errorf("chmod 600 in the view, after Sync: the container read %q", got)
	}
	// A directory made unreadable: opendir refused too.
	testutil.Must(t, os.Chmod(filepath.Join(ws, "d"), 0o755))
	v.Sync()
	asFsuid(uid, func() {
		if _, err := os.ReadDir(filepath.Join(v.Path(0), "d")); err != nil {
			t.Errorf("d 755: %v", err)
		}
	})
	v.w.mu.Lock()
	testutil.Must(t, os.Chmod(filepath.Join(ws, "d"), 0o700))
	asFsuid(uid, func() {
		if _, err := os.ReadDir(filepath.Join(v.Path(0), "d")); err == nil {
			t.Errorf("d chmod 700, event not yet read: listed")
		}
	})
	v.w.mu.Unlock()
}

// TestExecOnlyRuns: the view's own check of an open's mode leaves execve
// of an execute-only program (mode 0711) working, as through a bind: the
// kernel's open for execve asks for the execute bit, not read.
func TestExecOnlyRuns(t *testing.T) {
	ws, v := mountCapped(t, 8)
	const uid = 0x7F030002
	v.Admit(uid)
	prog, err := exec.LookPath("true")
	testutil.Must(t, err)
	b, err := os.ReadFile(prog)
	testutil.Must(t, err)
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "xonly"), b, 0o711))
	testutil.Must(t, os.Chmod(filepath.Join(ws, "xonly"), 0o711))
	run := func(mode os.FileMode) error {
		testutil.Must(t, os.Chmod(filepath.Join(ws, "xonly"), mode))
		v.Sync()
		// Through sh: the process serving the view must not exec a file
		// of it itself (its forking thread holds a P the runtime then
		// waits for, and the child holds the FUSE fd: a deadlock).
		cmd := exec.Command("/bin/sh", "-c", `exec "$0"`, filepath.Join(v.Path(0), "xonly"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		return cmd.Run()
	}
	if err := run(0o711); err != nil {
		t.Errorf("exec of a 0711 program: %v", err)
	}
	if _, err := openAs(uid, filepath.Join(v.Path(0), "xonly")); err == nil {
		t.Errorf("read of a 0711 program by another uid succeeded")
	}
	if err := run(0o700); err == nil {
		t.Errorf("exec of a 0700 program by another uid succeeded")
	}
}

// TestReview8StaleDirModeOpens: the kernel checks a container's search
// permission on every directory of a path against the attributes it
// caches (default_permissions), and the view's own check of an open
// (permits) looked only at the file opened. A directory the host makes
// 0700 must close what is beneath it to other uids at once, as through a
// bind: while its event waits in the queue (a watched directory, the
// watcher held here as it is while the event waits), and where nothing
// reports it at all (a directory the watch budget or limit left
// unwatched: names and attributes cached for the short timeout, which
// Sync does not shorten, so the change was made before the command
// started). Each of open, opendir, readlink and exec beneath it, and the
// mount's own directory made 0700.
// docs/security.md, "The eighth review"
func TestReview8StaleDirModeOpens(t *testing.T) {
	for _, watched := range []bool{true, false} {
		t.Run(fmt.Sprint("watched=", watched), func(t *testing.T) {
			ws, v := mountCapped(t, 16)
			if !watched {
				setAdd(v.w, func(int, string, uint32) (int, error) { return -1, unix.ENOSPC })
			}
			const uid = 0x7F030008
			v.Admit(uid)
			in := func(rel string) string { return filepath.Join(v.Path(0), rel) }
			testutil.Must(t, os.MkdirAll(filepath.Join(ws, "d/e"), 0o755))
			testutil.Must(t, os.Chmod(filepath.Join(ws, "d/e"), 0o755))
			write(t, filepath.Join(ws, "d/g"), "SLUICE-SECRET-UNDER-0700\n")
			testutil.Must(t, os.Chmod(filepath.Join(ws, "d/g"), 0o644))
			testutil.Must(t, os.Symlink("SLUICE-SECRET-LINK-TARGET", filepath.Join(ws, "d/l")))
			v.Sync()
			probe := func() (got []string) {
				asFsuid(uid, func() {
					if b, err := os.ReadFile(in("d/g")); err == nil {
						got = append(got, "read d/g: "+string(b))
					}
					if names, err := os.ReadDir(in("d/e")); err == nil {
						got = append(got, fmt.Sprint("listed d/e: ", len(names)))
					}
					if target, err := os.Readlink(in("d/l")); err == nil {
						got = append(got, "readlink d/l: "+target)
					}
				})
				return got
			}
			// Everything cached: names, attributes, the directory's mode.
			if got := probe(); len(got) != 3 {
				t.Fatalf("before: %v", got)
			}
			for _, dir := range []string{"d", "."} {
				// "." is the mount's own directory.
				if watched {
					v.w.mu.Lock()
				}
				testutil.Must(t, os.Chmod(filepath.Join(ws, dir), 0o700))
				got := probe()
				if watched {
					v.w.mu.Unlock()
				}
				if len(got) != 0 {
					t.Errorf("%s made 0700 (event not yet read: %v): another uid still %v", dir, watched, got)
				}
				v.Sync()
				if got := probe(); len(got) != 0 {
					t.Errorf("%s made 0700, after Sync: another uid still %v", dir, got)
				}
				testutil.Must(t, os.Chmod(filepath.Join(ws, dir), 0o755))
				v.Sync()
				eventually(t, dir+" back to 0755", func() bool { return len(probe()) == 3 })
			}
		})
	}
}
