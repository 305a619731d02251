package fsview

// Second review of the lazy opendir (02e37b0, hz/review7): these pass on
// main and pin what the change must keep.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestReview7UnreadDirRenamedToNever: TestHeldDirRenamedToNever reads the
// held directory before the host renames it, so its fd was opened at the
// old name. Since 02e37b0 a directory is opened for reading only at its
// first READDIR: here the first read comes after the rename to a never
// name (and, in a second case, after another directory took its name).
// The read must list nothing created there, in both securefs modes.
func TestReview7UnreadDirRenamedToNever(t *testing.T) {
	for _, mode := range modes() {
		for _, swap := range []bool{false, true} {
			t.Run(fmt.Sprint(mode, " swap=", swap), func(t *testing.T) {
				f := newView(t, mode)
				host := func(rel string) string { return filepath.Join(f.ws, rel) }
				testutil.Must(t, os.MkdirAll(host("src/d"), 0o755))
				write(t, host("src/d/a"), "a\n")
				d, err := os.Open(f.in("src/d"))
				testutil.Must(t, err)
				defer d.Close()
				testutil.Must(t, os.RemoveAll(host("private")))
				testutil.Must(t, os.Rename(host("src/d"), host("private")))
				write(t, host("private/SECRET-NAME"), "SLUICE-SECRET-KEY\n")
				if swap {
					testutil.Must(t, os.MkdirAll(host("src/d"), 0o755))
					write(t, host("src/d/OTHER"), "x\n")
				}
				f.v.Sync()
				names, err := d.Readdirnames(-1)
				t.Logf("first read after the rename: %v %v", names, err)
				if slices.Contains(names, "SECRET-NAME") {
					t.Errorf("a name created in a never directory listed through a held, unread fd: %v", names)
				}
			})
		}
	}
}

// TestReview7UnreadDirsCap: directories opened and never read count one
// unit each against the caller's cap, and give it back on close, read or
// not, in both securefs modes; the process-wide count returns to where it
// was.
func TestReview7UnreadDirsCap(t *testing.T) {
	_, v := mountCapped(t, 6)
	const uid = 0x7F030001
	v.Admit(uid)
	base := held.Load()
	d := v.Path(0) + "/d"
	asFsuid(uid, func() {
		var fds []int
		var last error
		for len(fds) < 50 {
			fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				last = err
				break
			}
			fds = append(fds, fd)
		}
		if len(fds) != 6 || last != syscall.EMFILE {
			t.Errorf("held %d unread directories (then %v), want 6 then EMFILE", len(fds), last)
		}
		buf := make([]byte, 4096)
		for i, fd := range fds {
			if i%2 == 0 {
				if _, err := unix.Getdents(fd, buf); err != nil {
					t.Errorf("getdents: %v", err)
				}
			}
			unix.Close(fd)
		}
	})
	testutil.Must(t, testutil.Poll(5*time.Second, func() error {
		v.mu.RLock()
		n := v.uids[uid].open.Load()
		v.mu.RUnlock()
		if n != 0 || held.Load() != base {
			return fmt.Errorf("after closing: uid holds %d, process %d (was %d)", n, held.Load(), base)
		}
		return nil
	}))
}
