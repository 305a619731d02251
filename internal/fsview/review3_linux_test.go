package fsview

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
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

// watchedInodes reads which inode each watch of w is on, from the inotify
// fd's fdinfo ("inotify wd:3 ino:1a2b sdev:...").
func watchedInodes(t *testing.T, w *watcher) map[int32]uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", w.fd))
	testutil.Must(t, err)
	out := map[int32]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		var wd int32
		var ino uint64
		if _, err := fmt.Sscanf(line, "inotify wd:%x ino:%x", &wd, &ino); err == nil {
			out[wd] = ino
		}
	}
	return out
}

// TestWatchesNameTheirDirectory: while the host replaces a directory
// (renamed away, a new one made at its name) as a reader looks names up
// in it through the view, every watch the view keeps is on the directory
// its path names now; a watch left on the renamed one would leave the new
// directory's changes unreported while the kernel caches its names and
// listing for 10 minutes.
func TestWatchesNameTheirDirectory(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	host := func(rel string) string { return filepath.Join(f.ws, rel) }
	testutil.Must(t, os.MkdirAll(host("src/d"), 0o755))
	testutil.Must(t, os.MkdirAll(host("old"), 0o755))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.Lstat(f.in("src/d/x"))
			os.ReadDir(f.in("src/d"))
		}
	}()
	check := func(i int) bool {
		f.v.Sync()
		// Watches are added under wmu: holding it, fdinfo and byLoc agree.
		f.v.w.wmu.RLock()
		defer f.v.w.wmu.RUnlock()
		inos := watchedInodes(t, f.v.w)
		if len(inos) == 0 && len(f.v.w.byLoc) > 0 {
			t.Fatalf("no watch in fdinfo")
		}
		for l, wd := range f.v.w.byLoc {
			if l.m != 0 {
				continue
			}
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(f.ws, l.rel), &st); err != nil {
				continue // gone: its event is queued or read
			}
			if ino, ok := inos[wd]; ok && ino != st.Ino {
				t.Errorf("iteration %d: %q is watched on inode %d, but names inode %d now", i, l.rel, ino, st.Ino)
				return false
			}
		}
		return true
	}
	for i := range 3000 {
		// Kept, not removed: the removal of the old directory would
		// drop any watch left on it (IN_IGNORED).
		os.Rename(host("src/d"), host(fmt.Sprintf("old/%d", i)))
		os.Mkdir(host("src/d"), 0o755)
		write(t, host("src/d/x"), "x")
		if i%50 == 0 && !check(i) {
			break
		}
	}
	close(stop)
	<-done
	check(-1)
	// And the directory at src/d now reports its changes.
	listing(t, f.in("src/d"))
	absent(t, f.in("src/d/new"))
	write(t, host("src/d/new"), "n")
	f.v.Sync()
	if got := listing(t, f.in("src/d")); !slices.Equal(got, []string{"new", "x"}) {
		t.Errorf("src/d after a create: %v", got)
	}
}

// TestOverflowLeavesNothingStale: with the watcher held while the host
// floods the tree with more events than inotify queues (IN_Q_OVERFLOW:
// events lost), and in the same flood replaces a cached directory (the
// old one renamed to a never name), makes a cached file unreadable to
// others and creates a *.pem deep in cached directories: once the events
// are read, nothing cached from before shows, the old directory's content
// is under no name, and the new one's is.
func TestOverflowLeavesNothingStale(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	host := func(rel string) string { return filepath.Join(f.ws, rel) }
	testutil.Must(t, os.MkdirAll(host("src/sub/a/b/c"), 0o755))
	write(t, host("src/sub/old.txt"), "SLUICE-SECRET-OLD\n")
	write(t, host("src/sub/a/b/c/f"), "f\n")
	testutil.Must(t, os.Chmod(host("src/a.py"), 0o644))
	walkTree(t, f.in("src"))
	if got, err := openAs(0x7F030003, f.in("src/a.py")); err == nil || got != "" {
		// not admitted yet: refused by the view
		t.Fatalf("unadmitted uid read %q", got)
	}
	f.v.Admit(0x7F030003)
	for _, d := range []string{f.ws, host("src")} {
		os.Chmod(d, 0o755)
	}
	for d := filepath.Dir(f.ws); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	if got, err := openAs(0x7F030003, f.in("src/a.py")); err != nil {
		t.Fatalf("admitted uid: %q %v", got, err)
	}
	max := 16384
	if b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events"); err == nil {
		fmt.Sscan(string(b), &max)
	}
	f.v.w.mu.Lock()
	testutil.Must(t, os.RemoveAll(host("private")))
	testutil.Must(t, os.Rename(host("src/sub"), host("private")))
	testutil.Must(t, os.MkdirAll(host("src/sub/a/b/c"), 0o755))
	write(t, host("src/sub/new.txt"), "new\n")
	write(t, host("src/sub/a/b/c/id.pem"), "SLUICE-SECRET-PEM\n")
	testutil.Must(t, os.Chmod(host("src/a.py"), 0o600))
	p := host("src/churn")
	for range max/2 + 10 {
		write(t, p, "x")
		testutil.Must(t, os.Remove(p))
	}
	f.v.w.mu.Unlock()
	f.v.Sync()
	if got := listing(t, f.in("src/sub")); !slices.Equal(got, []string{"a", "new.txt"}) {
		t.Errorf("src/sub after the flood: %v", got)
	}
	if got := listing(t, f.in("src/sub/a/b/c")); len(got) != 0 {
		t.Errorf("src/sub/a/b/c after the flood: %v", got)
	}
	absent(t, f.in("src/sub/old.txt"))
	absent(t, f.in("src/sub/a/b/c/f"))
	absent(t, f.in("src/sub/a/b/c/id.pem"))
	absent(t, f.in("private/old.txt"))
	if got, err := openAs(0x7F030003, f.in("src/a.py")); err == nil {
		t.Errorf("a.py made 600 in the flood: read %q", got)
	}
	if fi, err := os.Lstat(f.in("src/a.py")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("a.py's mode after the flood: %v %v", fi, err)
	}
}

// TestWatchLimitPartial: with the inotify watch limit reached part way
// down a tree (the first watches taken, the rest refused), host changes
// deep in the unwatched part show within the short timeout, hidden names
// stay hidden, and once watches can be added again the tree is watched
// and fresh after Sync.
func TestWatchLimitPartial(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	host := func(rel string) string { return filepath.Join(f.ws, rel) }
	testutil.Must(t, os.MkdirAll(host("src/d1/d2/d3/d4"), 0o755))
	write(t, host("src/d1/d2/d3/d4/x"), "x\n")
	var n int
	var mu sync.Mutex
	setAdd(f.v.w, func(fd int, p string, m uint32) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if n++; n > 3 {
			return -1, unix.ENOSPC
		}
		return unix.InotifyAddWatch(fd, p, m)
	})
	walkTree(t, f.in("src"))
	w := f.v.Watches()
	if w == 0 || w > 3 {
		t.Fatalf("%d watches, want 1..3", w)
	}
	write(t, host("src/d1/d2/d3/d4/y"), "y\n")
	write(t, host("src/d1/d2/d3/d4/k.pem"), "SLUICE-SECRET-PEM\n")
	testutil.Must(t, os.Remove(host("src/d1/d2/d3/d4/x")))
	eventually(t, "deep change in the unwatched part", func() bool {
		ents, err := os.ReadDir(f.in("src/d1/d2/d3/d4"))
		if err != nil || len(ents) != 1 || ents[0].Name() != "y" {
			return false
		}
		_, err = os.Lstat(f.in("src/d1/d2/d3/d4/x")) // its name: cached for the short timeout
		return err != nil
	})
	absent(t, f.in("src/d1/d2/d3/d4/k.pem"))
	absent(t, f.in("src/d1/d2/d3/d4/x"))
	setAdd(f.v.w, unix.InotifyAddWatch)
	walkTree(t, f.in("src"))
	write(t, host("src/d1/d2/d3/d4/z"), "z\n")
	f.v.Sync()
	if got := listing(t, f.in("src/d1/d2/d3/d4")); !slices.Equal(got, []string{"y", "z"}) {
		t.Errorf("after watches came back: %v", got)
	}
}

// TestHeldDirRenamedToNever: a directory held open through the view (a
// shell's cwd, find's fd) that the host renames to a never name lists no
// name created there afterwards, after a rewind, and opens nothing in it.
// The open directory is read from the fd sluiced opened; without a
// check that the node's path still names it, a rewind of an uncached
// listing listed SECRET-NAME. (Names the kernel cached while the path
// was allowed may still be listed: they were shown then.)
func TestHeldDirRenamedToNever(t *testing.T) {
	for _, watched := range []bool{true, false} {
		t.Run(fmt.Sprint("watched=", watched), func(t *testing.T) {
			f := newView(t, securefs.ModeOpenat2)
			if !watched {
				setAdd(f.v.w, func(int, string, uint32) (int, error) { return -1, unix.ENOSPC })
			}
			host := func(rel string) string { return filepath.Join(f.ws, rel) }
			testutil.Must(t, os.MkdirAll(host("src/d"), 0o755))
			write(t, host("src/d/a"), "a\n")
			d, err := os.Open(f.in("src/d"))
			testutil.Must(t, err)
			defer d.Close()
			names, err := d.Readdirnames(-1)
			t.Logf("before: %v %v", names, err)
			testutil.Must(t, os.RemoveAll(host("private")))
			testutil.Must(t, os.Rename(host("src/d"), host("private")))
			write(t, host("private/SECRET-NAME"), "SLUICE-SECRET-KEY\n")
			f.v.Sync()
			_, err = d.Seek(0, 0)
			testutil.Must(t, err)
			names, err = d.Readdirnames(-1)
			t.Logf("after: %v %v", names, err)
			if slices.Contains(names, "SECRET-NAME") {
				t.Errorf("a name created in a never directory listed through a held fd: %v", names)
			}
			fd, err := unix.Openat(int(d.Fd()), "SECRET-NAME", unix.O_RDONLY, 0)
			if err == nil {
				b := make([]byte, 64)
				n, _ := unix.Read(fd, b)
				unix.Close(fd)
				t.Errorf("opened SECRET-NAME through the held fd: %q", b[:n])
			}
		})
	}
}

// TestSwapsAndLinks: more host edits against cached entries, each
// checked before any Sync (the watch may not have been read: only the
// open's own resolution stands) and after:
//   - a file hard-linked under a never name is hidden there and shown
//     under its allowed name; a never file hard-linked under an allowed
//     name is shown there (its content is what that path holds: the
//     view hides paths, not inodes);
//   - a cached symlink swapped for a directory holding a *.pem, and a
//     cached directory swapped for a symlink to the never directory;
//   - content replaced in place with the mtime and size kept: read as
//     it is now;
//   - a directory deleted and made again with the same name, holding a
//     never name.
func TestSwapsAndLinks(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	host := func(rel string) string { return filepath.Join(f.ws, rel) }
	read := func(rel string) (string, error) {
		b, err := os.ReadFile(f.in(rel))
		return string(b), err
	}
	// Hard links.
	testutil.Must(t, os.Link(host("src/a.py"), host("src/a.pem")))
	absent(t, f.in("src/a.pem"))
	if got, err := read("src/a.py"); err != nil || got != "print('a')\n" {
		t.Errorf("a.py with a hidden link: %q %v", got, err)
	}
	testutil.Must(t, os.Link(host("private/key"), host("src/key-link")))
	f.v.Sync()
	if got, _ := read("src/key-link"); got != "SLUICE-SECRET-KEY\n" {
		t.Errorf("allowed link to a never file: %q (its path is allowed: shown)", got)
	}
	absent(t, f.in("private/key"))

	// A symlink swapped for a directory, and back.
	testutil.Must(t, os.Symlink("a.py", host("src/s")))
	if fi, err := os.Lstat(f.in("src/s")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("src/s: %v %v", fi, err)
	}
	read("src/s")
	testutil.Must(t, os.Remove(host("src/s")))
	testutil.Must(t, os.Mkdir(host("src/s"), 0o755))
	write(t, host("src/s/id.pem"), "SLUICE-SECRET-PEM\n")
	write(t, host("src/s/ok"), "ok\n")
	// Before the watch is read the kernel may still take s for the
	// link: its readlink then fails (EINVAL), and nothing is read.
	unread(t, f.in("src/s/id.pem"))
	f.v.Sync()
	if got := listing(t, f.in("src/s")); !slices.Equal(got, []string{"ok"}) {
		t.Errorf("src/s as a directory: %v", got)
	}
	absent(t, f.in("src/s/id.pem"))
	testutil.Must(t, os.RemoveAll(host("src/s")))
	testutil.Must(t, os.Symlink("../private", host("src/s")))
	unread(t, f.in("src/s/key"))
	f.v.Sync()
	absent(t, f.in("src/s/key"))

	// In place, mtime and size kept.
	p := host("src/a.py")
	fi, err := os.Stat(p)
	testutil.Must(t, err)
	if got, _ := read("src/a.py"); got != "print('a')\n" {
		t.Fatalf("a.py: %q", got)
	}
	old, err := os.Open(f.in("src/a.py")) // held open meanwhile
	testutil.Must(t, err)
	defer old.Close()
	testutil.Must(t, os.WriteFile(p, []byte("print('B')\n"), 0o644))
	testutil.Must(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
	if got, _ := read("src/a.py"); got != "print('B')\n" {
		t.Errorf("replaced in place, mtime kept, not synced: %q", got)
	}

	// Deleted and made again.
	testutil.Must(t, os.MkdirAll(host("src/gone"), 0o755))
	write(t, host("src/gone/f"), "f1\n")
	listing(t, f.in("src/gone"))
	read("src/gone/f")
	testutil.Must(t, os.RemoveAll(host("src/gone")))
	testutil.Must(t, os.MkdirAll(host("src/gone"), 0o755))
	write(t, host("src/gone/.env"), "SLUICE-SECRET-ENV\n")
	write(t, host("src/gone/g"), "g\n")
	unread(t, f.in("src/gone/f"))
	unread(t, f.in("src/gone/.env"))
	f.v.Sync()
	if got := listing(t, f.in("src/gone")); !slices.Equal(got, []string{"g"}) {
		t.Errorf("src/gone made again: %v", got)
	}
}

// unread: p cannot be read (whatever the error: a cache not yet told of
// a change may fail a walk otherwise than ENOENT).
func unread(t *testing.T, p string) {
	t.Helper()
	if b, err := os.ReadFile(p); err == nil {
		t.Errorf("%s: read %q", p, b)
	}
}

// TestWatchBudget: the views of a process hold at most their budget of
// inotify watches (half the per-user limit root shares with the host's
// own services): a walk of a tree bigger than what is left watches no
// more, and the unwatched part is served fresh (short timeout, no
// listing cache). Every watch is given back when the view goes.
func TestWatchBudget(t *testing.T) {
	base := watchesHeld.Load()
	f := newView(t, securefs.ModeOpenat2)
	if watchBudget.Load() < 1000 {
		t.Errorf("budget %d: not half of max_user_watches", watchBudget.Load())
	}
	tree(t, f.ws, 10, 2)
	listing(t, f.in("src"))
	held := watchesHeld.Load()
	watchBudget.Store(held + 3)
	walkTree(t, f.in("tree"))
	if got := watchesHeld.Load(); got > held+3 || f.v.Watches() > int(held-base)+3 {
		t.Errorf("%d watches held (%d by the view), budget %d", got, f.v.Watches(), held+3)
	}
	// A directory past the budget: a change there shows within the
	// short timeout, though no event reports it.
	for d := range 10 {
		write(t, filepath.Join(f.ws, "tree", fmt.Sprintf("d%02d", d), "new"), "n")
	}
	eventually(t, "new files in unwatched directories", func() bool {
		for d := range 10 {
			if !slices.Contains(listing(t, f.in(fmt.Sprintf("tree/d%02d", d))), "new") {
				return false
			}
		}
		return true
	})
	f.v.Close()
	<-f.v.Done()
	if got := watchesHeld.Load(); got != base {
		t.Errorf("after the view closed: %d watches counted, %d before it", got, base)
	}
	setWatchBudget()
}
