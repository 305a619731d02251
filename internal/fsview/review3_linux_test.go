package fsview

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/testutil"
)

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
		cmd := exec.Command(filepath.Join(v.Path(0), "xonly"))
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
