package fsview

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// walkTree lstats everything beneath dir and lists every directory, as
// find and git status do; it returns what it saw, sorted.
func walkTree(t *testing.T, dir string) []string {
	t.Helper()
	var seen []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		seen = append(seen, fmt.Sprintf("%s %v %d", strings.TrimPrefix(p, dir), fi.Mode(), fi.Size()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(seen)
	return seen
}

func tree(t *testing.T, ws string, dirs, files int) {
	t.Helper()
	for d := range dirs {
		dir := filepath.Join(ws, "tree", fmt.Sprintf("d%02d", d))
		testutil.Must(t, os.MkdirAll(dir, 0o755))
		for f := range files {
			write(t, filepath.Join(dir, fmt.Sprintf("f%03d", f)), "x")
		}
	}
}

func since(a, b Stats) Stats {
	return Stats{Lookups: b.Lookups - a.Lookups, Opendirs: b.Opendirs - a.Opendirs, DirFDs: b.DirFDs - a.DirFDs, Readdirs: b.Readdirs - a.Readdirs}
}

// TestWalkServedFromCache: a second walk of a tree through a view is
// answered by the kernel: no name is looked up and no directory read
// again (each opendir still reaches the view, which checks the caller and
// resolves the path, but opens nothing for reading). After a host change
// and Sync, only what changed is read again.
func TestWalkServedFromCache(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	tree(t, f.ws, 10, 50)
	s := f.v.Stats()
	first := walkTree(t, f.in("tree"))
	if d := since(s, f.v.Stats()); d.DirFDs != 11 {
		t.Errorf("first walk opened %d directories for reading, want 11: %+v", d.DirFDs, d)
	}
	s0 := f.v.Stats()
	if again := walkTree(t, f.in("tree")); !slices.Equal(first, again) {
		t.Fatalf("second walk differs")
	}
	d := since(s0, f.v.Stats())
	if d.Lookups != 0 || d.Readdirs != 0 || d.Opendirs != 11 || d.DirFDs != 0 {
		t.Errorf("second walk reached the view: %+v, want 0 lookups, 0 reads, 11 opendirs, 0 directories opened for reading", d)
	}
	if f.v.Watches() < 11 {
		t.Errorf("%d directories watched, want ≥ 11", f.v.Watches())
	}
	// One new file in one directory.
	write(t, filepath.Join(f.ws, "tree", "d07", "new"), "new!")
	f.v.Sync()
	s1 := f.v.Stats()
	after := walkTree(t, f.in("tree"))
	if !slices.Contains(after, "/d07/new -rw-r--r-- 4") || len(after) != len(first)+1 {
		t.Errorf("after a host create: %d entries, new one shown: %v", len(after), slices.Contains(after, "/d07/new -rw-r--r-- 4"))
	}
	if d := since(s1, f.v.Stats()); d.Readdirs > 2 || d.Lookups > 60 {
		t.Errorf("after one create the walk re-read %+v, want one directory", d)
	}
}

// TestCacheFreshAfterSync: names, attributes and listings are cached for
// DefaultCacheTimeout (minutes), yet every host change shows as soon as
// Sync returns: the invalidations are driven by the watch, not a timer.
// Each step first caches what it then changes.
func TestCacheFreshAfterSync(t *testing.T) {
	for _, mode := range modes() {
		t.Run(mode.String(), func(t *testing.T) {
			f := newView(t, mode)
			host := func(rel string) string { return filepath.Join(f.ws, rel) }
			read := func(rel string) string {
				b, _ := os.ReadFile(f.in(rel))
				return string(b)
			}
			size := func(rel string) int64 {
				fi, err := os.Lstat(f.in(rel))
				if err != nil {
					return -1
				}
				return fi.Size()
			}
			check := func(what string, got, want any) {
				t.Helper()
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s: got %v, want %v", what, got, want)
				}
			}
			// Content and size of a file rewritten in place.
			check("before", read("src/a.py")+fmt.Sprint(size("src/a.py")), "print('a')\n11")
			write(t, host("src/a.py"), "print('a longer line')\n")
			f.v.Sync()
			check("rewritten in place", read("src/a.py")+fmt.Sprint(size("src/a.py")), "print('a longer line')\n23")
			// Saved by rename over it.
			write(t, host("src/a.py.tmp"), "v3\n")
			testutil.Must(t, os.Rename(host("src/a.py.tmp"), host("src/a.py")))
			f.v.Sync()
			check("renamed over", read("src/a.py"), "v3\n")
			check("temp name gone", testutil.Listing(t, f.in("src")), []string{"a.py"})
			// A mode change.
			testutil.Must(t, os.Chmod(host("src/a.py"), 0o600))
			f.v.Sync()
			fi, err := os.Lstat(f.in("src/a.py"))
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("chmod: %v %v", fi.Mode(), err)
			}
			// New and removed names in a listed directory.
			write(t, host("src/b.py"), "b\n")
			write(t, host("src/id.pem"), "SLUICE-SECRET-PEM\n")
			f.v.Sync()
			check("created", testutil.Listing(t, f.in("src")), []string{"a.py", "b.py"})
			testutil.Must(t, os.Remove(host("src/b.py")))
			f.v.Sync()
			check("removed", testutil.Listing(t, f.in("src")), []string{"a.py"})
			absent(t, f.in("src/b.py"))
			absent(t, f.in("src/id.pem"))
			// A cached directory renamed to a never name, and its
			// contents: gone under both names.
			testutil.Must(t, os.MkdirAll(host("src/keys/deep"), 0o755))
			write(t, host("src/keys/deep/k"), "SLUICE-SECRET-MOVED\n")
			check("before the move", read("src/keys/deep/k"), "SLUICE-SECRET-MOVED\n")
			check("listed", testutil.Listing(t, f.in("src/keys/deep")), []string{"k"})
			testutil.Must(t, os.RemoveAll(host("private")))
			testutil.Must(t, os.Rename(host("src/keys"), host("private")))
			f.v.Sync()
			absent(t, f.in("src/keys/deep/k"))
			absent(t, f.in("private/deep/k"))
			check("src after the move", testutil.Listing(t, f.in("src")), []string{"a.py"})
			// A new *.pem at depth 5 in cached directories.
			testutil.Must(t, os.MkdirAll(host("src/a/b/c/d"), 0o755))
			f.v.Sync()
			check("deep dir", testutil.Listing(t, f.in("src/a/b/c/d")), []string(nil))
			write(t, host("src/a/b/c/d/id.pem"), "SLUICE-SECRET-PEM\n")
			write(t, host("src/a/b/c/d/ok"), "ok\n")
			f.v.Sync()
			check("deep dir after", testutil.Listing(t, f.in("src/a/b/c/d")), []string{"ok"})
			absent(t, f.in("src/a/b/c/d/id.pem"))
			// A directory replaced by a symlink to outside: a link, and
			// nothing through it leads out of the view.
			testutil.Must(t, os.RemoveAll(host("src/a")))
			testutil.Must(t, os.Symlink(f.out, host("src/a")))
			f.v.Sync()
			if fi, err := os.Lstat(f.in("src/a")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("src/a after replace: %v %v", fi, err)
			}
			absent(t, f.in("src/a/b/c/d/ok"))
			// A directory renamed to a new name keeps nothing stale at
			// the old one, and shows its content under the new.
			testutil.Must(t, os.MkdirAll(host("src/m"), 0o755))
			write(t, host("src/m/x"), "x\n")
			check("m", read("src/m/x"), "x\n")
			testutil.Must(t, os.Rename(host("src/m"), host("src/n")))
			testutil.Must(t, os.MkdirAll(host("src/m"), 0o755))
			write(t, host("src/m/y"), "y\n")
			f.v.Sync()
			check("new m", testutil.Listing(t, f.in("src/m")), []string{"y"})
			check("n", read("src/n/x"), "x\n")
			absent(t, f.in("src/m/x"))
			write(t, host("src/n/z"), "z\n")
			f.v.Sync()
			check("n after a create (its watch followed the rename)", testutil.Listing(t, f.in("src/n")), []string{"x", "z"})
			// The file mount follows a save.
			check("cfg", func() string { b, _ := os.ReadFile(f.v.Path(1)); return string(b) }(), "cfg v1\n")
			write(t, host("cfg.new"), "cfg v2, longer\n")
			testutil.Must(t, os.Rename(host("cfg.new"), host("cfg.txt")))
			f.v.Sync()
			check("cfg saved", func() string { b, _ := os.ReadFile(f.v.Path(1)); return string(b) }(), "cfg v2, longer\n")
		})
	}
}

// TestFreshWhileOldOpen: a file replaced (renamed over) while a reader
// holds the old one open through the view reads as the new file at the
// next open. go-fuse hands a passthrough open the backing file of a live
// open of the same node, and a file mount's node outlives any save (its
// entry is never dropped): without reading such an open through sluiced,
// the new open read the old file.
func TestFreshWhileOldOpen(t *testing.T) {
	for _, mode := range modes() {
		t.Run(mode.String(), func(t *testing.T) {
			f := newView(t, mode)
			host := func(rel string) string { return filepath.Join(f.ws, rel) }
			for _, c := range []struct{ in, host string }{{f.v.Path(1), "cfg.txt"}, {f.in("src/a.py"), "src/a.py"}} {
				old, err := os.Open(c.in)
				testutil.Must(t, err)
				was, err := io.ReadAll(old)
				testutil.Must(t, err)
				write(t, host(c.host+".new"), "new and longer than before\n")
				testutil.Must(t, os.Rename(host(c.host+".new"), host(c.host)))
				f.v.Sync()
				got, err := os.ReadFile(c.in)
				if err != nil || string(got) != "new and longer than before\n" {
					t.Errorf("%s with the old file (%q) still open: got %q, %v", c.host, was, got, err)
				}
				old.Close()
			}
			// The same before any Sync: the kernel may still hold the
			// entry of the old file (the watch has not been acted on);
			// the open is then answered ESTALE and the kernel looks the
			// name up again.
			for i := range 20 {
				old, err := os.Open(f.in("src/a.py"))
				testutil.Must(t, err)
				_, err = io.ReadAll(old)
				testutil.Must(t, err)
				want := fmt.Sprintf("version %d\n", i)
				write(t, host("src/a.py.new"), want)
				testutil.Must(t, os.Rename(host("src/a.py.new"), host("src/a.py")))
				got, err := os.ReadFile(f.in("src/a.py"))
				if err != nil || string(got) != want {
					t.Errorf("src/a.py replaced, not yet synced, the old one open: got %q, %v; want %q", got, err, want)
				}
				old.Close()
			}
		})
	}
}

// TestListingConverges: while the host creates, renames and removes names
// in a directory that a reader lists through the view over and over, the
// listing may lag; once the host stops and Sync returns, it is exactly
// the host's (less hidden names), and stays so.
func TestListingConverges(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	dir := filepath.Join(f.ws, "src")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.ReadDir(f.in("src"))
			os.Lstat(f.in("src/c5"))
		}
	}()
	for i := range 400 {
		p := filepath.Join(dir, fmt.Sprintf("c%d", i%10))
		switch i % 4 {
		case 0:
			os.WriteFile(p, []byte("x"), 0o644)
		case 1:
			os.Rename(p, p+".pem")
		case 2:
			os.Remove(p + ".pem")
			os.WriteFile(p, []byte("xy"), 0o644)
		case 3:
			os.Remove(filepath.Join(dir, fmt.Sprintf("c%d", (i+3)%10)))
		}
	}
	close(stop)
	wg.Wait()
	f.v.Sync()
	var want []string
	ents, err := os.ReadDir(dir)
	testutil.Must(t, err)
	for _, e := range ents {
		if !never(0, "src/"+e.Name()) {
			want = append(want, e.Name())
		}
	}
	for range 3 {
		if got := testutil.Listing(t, f.in("src")); !slices.Equal(got, want) {
			t.Fatalf("listing after the churn:\n got %v\nwant %v", got, want)
		}
	}
	for _, name := range want {
		fi, err := os.Lstat(filepath.Join(dir, name))
		testutil.Must(t, err)
		vi, err := os.Lstat(f.in("src/" + name))
		if err != nil || vi.Size() != fi.Size() {
			t.Errorf("%s: size %v (%v), host %d", name, vi, err, fi.Size())
		}
	}
}

// TestUnwatchedServedUncached: where a directory cannot be watched (the
// inotify watch limit), or the view has no inotify instance at all (the
// per-user instance limit), its listing is not kept by the kernel: every
// walk reads it again, so nothing stale outlives the short timeout.
func TestUnwatchedServedUncached(t *testing.T) {
	for _, c := range []struct {
		name string
		seam func()
	}{
		{"no watches", func() { addWatch = func(int, string, uint32) (int, error) { return -1, unix.ENOSPC } }},
		{"no instance", func() { inotifyInit = func(int) (int, error) { return -1, unix.EMFILE } }},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.seam()
			t.Cleanup(func() { addWatch, inotifyInit = unix.InotifyAddWatch, unix.InotifyInit1 })
			f := newView(t, securefs.ModeOpenat2)
			tree(t, f.ws, 3, 5)
			walkTree(t, f.in("tree"))
			s0 := f.v.Stats()
			walkTree(t, f.in("tree"))
			if d := since(s0, f.v.Stats()); d.Readdirs < 4 {
				t.Errorf("unwatched directories were listed from a cache: %+v", d)
			}
			if f.v.Watches() != 0 {
				t.Errorf("%d watches", f.v.Watches())
			}
			f.v.Sync() // a no-op, not a hang
			write(t, filepath.Join(f.ws, "tree", "d01", "new"), "n")
			if got := testutil.Listing(t, f.in("tree/d01")); !slices.Contains(got, "new") {
				t.Errorf("unwatched: a new file is not listed at once: %v", got)
			}
		})
	}
}

// TestOverflowAndSavesKeepTopEntries: when inotify's queue overflows
// (events lost) everything cached is dropped and rebuilt, and a save of a
// file mount drops its attributes; neither invalidates the view's top
// entries, which containers bind (a bind of an invalidated dentry fails
// with ENOENT). After the overflow the listing is the host's again.
func TestOverflowAndSavesKeepTopEntries(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	var tops []int
	for i := range 2 {
		fd, err := unix.Open(f.v.Path(i), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		testutil.Must(t, err)
		defer unix.Close(fd)
		tops = append(tops, fd)
	}
	testutil.Listing(t, f.in("src"))
	// A save of the file mount.
	write(t, filepath.Join(f.ws, "cfg.new"), "cfg v2\n")
	testutil.Must(t, os.Rename(filepath.Join(f.ws, "cfg.new"), filepath.Join(f.ws, "cfg.txt")))
	f.v.Sync()
	// An overflow: hold the watcher while the host makes more events
	// than the queue keeps (fs.inotify.max_queued_events, 16384 by
	// default).
	max := 16384
	if b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events"); err == nil {
		fmt.Sscan(string(b), &max)
	}
	f.v.w.mu.Lock()
	p := filepath.Join(f.ws, "src", "churn")
	for range max/2 + 10 {
		write(t, p, "x")
		testutil.Must(t, os.Remove(p))
	}
	write(t, filepath.Join(f.ws, "src", "after"), "a")
	f.v.w.mu.Unlock()
	f.v.Sync()
	if got := testutil.Listing(t, f.in("src")); !slices.Equal(got, []string{"a.py", "after"}) {
		t.Errorf("listing after an overflow: %v", got)
	}
	if b, err := os.ReadFile(f.v.Path(1)); err != nil || string(b) != "cfg v2\n" {
		t.Errorf("file mount after a save: %q %v", b, err)
	}
	for i, fd := range tops {
		target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		if err != nil || strings.HasSuffix(target, "(deleted)") {
			t.Errorf("top entry %d: %q %v: invalidated", i, target, err)
		}
	}
}

// TestMissCachedUntilCreated: a name looked up and found missing in a
// watched directory is kept missing by the kernel (git status asks for a
// .gitignore in every directory, every run) until the host creates it;
// then it shows as soon as Sync returns. Where nothing watches, a miss
// is asked again every time.
func TestMissCachedUntilCreated(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	missing := f.in("src/.gitignore")
	absent(t, missing)
	s0 := f.v.Stats()
	for range 5 {
		absent(t, missing)
	}
	if d := since(s0, f.v.Stats()); d.Lookups != 0 {
		t.Errorf("a miss in a watched directory was looked up %d more times", d.Lookups)
	}
	write(t, filepath.Join(f.ws, "src", ".gitignore"), "*.o\n")
	f.v.Sync()
	if b, err := os.ReadFile(missing); err != nil || string(b) != "*.o\n" {
		t.Errorf("created after a cached miss: %q %v", b, err)
	}
	// A hidden name stays hidden, cached or not.
	absent(t, f.in("src/id.pem"))
	write(t, filepath.Join(f.ws, "src", "id.pem"), "SLUICE-SECRET-PEM\n")
	f.v.Sync()
	absent(t, f.in("src/id.pem"))

	setAdd(f.v.w, func(int, string, uint32) (int, error) { return -1, unix.ENOSPC })
	testutil.Must(t, os.MkdirAll(filepath.Join(f.ws, "unwatched"), 0o755))
	f.v.Sync()
	absent(t, f.in("unwatched/x"))
	s1 := f.v.Stats()
	absent(t, f.in("unwatched/x"))
	if d := since(s1, f.v.Stats()); d.Lookups == 0 {
		t.Error("a miss in an unwatched directory was answered from a cache")
	}
}

// setAdd replaces how w adds a watch, under the lock ensure reads it
// with: the kernel may still be looking names up (readahead of a
// listing) while a test changes it.
func setAdd(w *watcher, add func(int, string, uint32) (int, error)) {
	w.wmu.Lock()
	w.add = add
	w.wmu.Unlock()
}

// TestOverflowDropsEveryMiss: a miss cached before inotify's queue
// overflows is dropped by the overflow's reset, wherever it was cached. A
// mount's own directory is never invalidated itself (containers bind it),
// so a miss cached directly in it stayed: a file created there during the
// burst was ENOENT to stat for the negative timeout, 10 minutes
// (docs/security.md, "The third review"). A miss in a directory beneath
// went with that directory's name; one cached through a process's cwd in
// it must go too.
func TestOverflowDropsEveryMiss(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	host := func(rel string) string { return filepath.Join(f.ws, rel) }
	// A process whose cwd is src: its lookups there do not walk src's
	// name again.
	cwd, err := unix.Open(f.in("src"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	testutil.Must(t, err)
	defer unix.Close(cwd)
	misses := []string{"late.txt", "src/late.txt"}
	for _, rel := range misses {
		absent(t, f.in(rel))
	}
	var st unix.Stat_t
	if err := unix.Fstatat(cwd, "viacwd", &st, unix.AT_SYMLINK_NOFOLLOW); err != unix.ENOENT {
		t.Fatalf("src/viacwd before: %v", err)
	}
	s0 := f.v.Stats()
	for _, rel := range misses {
		absent(t, f.in(rel))
	}
	if d := since(s0, f.v.Stats()); d.Lookups != 0 {
		t.Fatalf("misses not cached before the overflow (%d lookups): the test proves nothing", d.Lookups)
	}
	max := 16384
	if b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events"); err == nil {
		fmt.Sscan(string(b), &max)
	}
	// The watcher is held while the host makes more events than the
	// queue keeps, then the new files: their events are lost.
	f.v.w.mu.Lock()
	p := host("src/churn")
	for range max/2 + 10 {
		write(t, p, "x")
		testutil.Must(t, os.Remove(p))
	}
	for _, rel := range misses {
		write(t, host(rel), "late\n")
	}
	write(t, host("src/viacwd"), "late\n")
	f.v.w.mu.Unlock()
	f.v.Sync()
	for _, rel := range misses {
		if b, err := os.ReadFile(f.in(rel)); err != nil || string(b) != "late\n" {
			t.Errorf("%s created during an overflow: %q %v", rel, b, err)
		}
	}
	if err := unix.Fstatat(cwd, "viacwd", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Errorf("src/viacwd created during an overflow, through a cwd: %v", err)
	}
}

// Review 3: attacks on the view's long kernel caches.

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
	testutil.Listing(t, f.in("src/d"))
	absent(t, f.in("src/d/new"))
	write(t, host("src/d/new"), "n")
	f.v.Sync()
	if got := testutil.Listing(t, f.in("src/d")); !slices.Equal(got, []string{"new", "x"}) {
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
	if got := testutil.Listing(t, f.in("src/sub")); !slices.Equal(got, []string{"a", "new.txt"}) {
		t.Errorf("src/sub after the flood: %v", got)
	}
	if got := testutil.Listing(t, f.in("src/sub/a/b/c")); len(got) != 0 {
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
	if got := testutil.Listing(t, f.in("src/d1/d2/d3/d4")); !slices.Equal(got, []string{"y", "z"}) {
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
	if got := testutil.Listing(t, f.in("src/s")); !slices.Equal(got, []string{"ok"}) {
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
	testutil.Listing(t, f.in("src/gone"))
	read("src/gone/f")
	testutil.Must(t, os.RemoveAll(host("src/gone")))
	testutil.Must(t, os.MkdirAll(host("src/gone"), 0o755))
	write(t, host("src/gone/.env"), "SLUICE-SECRET-ENV\n")
	write(t, host("src/gone/g"), "g\n")
	unread(t, f.in("src/gone/f"))
	unread(t, f.in("src/gone/.env"))
	f.v.Sync()
	if got := testutil.Listing(t, f.in("src/gone")); !slices.Equal(got, []string{"g"}) {
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
	testutil.Listing(t, f.in("src"))
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
			if !slices.Contains(testutil.Listing(t, f.in(fmt.Sprintf("tree/d%02d", d))), "new") {
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

// Second review of the lazy opendir (02e37b0, hz/review7): these pass on
// main and pin what the change must keep.

// TestReview7UnreadDirRenamedToNever: TestHeldDirRenamedToNever reads the
// held directory before the host renames it, so its fd was opened at the
// old name. Since 02e37b0 a directory is opened for reading only at its
// first READDIR: here the first read comes after the rename to a never
// name (and, in a second case, after another directory took its name).
// The read must list nothing created there, in both securefs modes.
// docs/security.md, "The sixth and seventh reviews" (the seventh)
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
// docs/security.md, "The sixth and seventh reviews" (the seventh)
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

// TestReview8HeldCwdRenamedToNever: a container's cwd (here an fd of
// the directory, opened O_PATH as a cwd is held, and one opened for
// reading) sits in an allowed directory the host renames to a never
// name, and fills it with a secret: nothing is read, listed or looked up
// through it afterwards, relative to it or through "..", before Sync and
// after. And the reverse: a never directory renamed to an allowed name
// shows (its path is allowed now), and once renamed back is gone again.
// docs/security.md, "The eighth review"
func TestReview8HeldCwdRenamedToNever(t *testing.T) {
	for _, mode := range modes() {
		for _, watched := range []bool{true, false} {
			t.Run(fmt.Sprint(mode, " watched=", watched), func(t *testing.T) {
				f := newView(t, mode)
				if !watched {
					setAdd(f.v.w, func(int, string, uint32) (int, error) { return -1, unix.ENOSPC })
				}
				host := func(rel string) string { return filepath.Join(f.ws, rel) }
				testutil.Must(t, os.MkdirAll(host("src/d/sub"), 0o755))
				write(t, host("src/d/a"), "a\n")
				write(t, host("src/d/sub/b"), "b\n")
				// Cache it all: walk, read, list.
				walkTree(t, f.in("src"))
				cwd, err := unix.Open(f.in("src/d"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				testutil.Must(t, err)
				defer unix.Close(cwd)
				dfd, err := unix.Open(f.in("src/d"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				testutil.Must(t, err)
				defer unix.Close(dfd)
				sub, err := unix.Open(f.in("src/d/sub"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				testutil.Must(t, err)
				defer unix.Close(sub)

				testutil.Must(t, os.RemoveAll(host("private")))
				testutil.Must(t, os.Rename(host("src/d"), host("src/keys.pem")))
				write(t, host("src/keys.pem/SECRET"), "SLUICE-SECRET-IN-RENAMED\n")
				write(t, host("src/keys.pem/sub/SECRET2"), "SLUICE-SECRET-IN-RENAMED\n")
				write(t, host("src/keys.pem/a"), "SLUICE-SECRET-OVER-A\n")
				check := func(when string) {
					t.Helper()
					for _, c := range []struct {
						at   int
						name string
					}{{cwd, "SECRET"}, {cwd, "a"}, {cwd, "sub/SECRET2"}, {sub, "SECRET2"}, {sub, "../SECRET"}, {dfd, "SECRET"}, {cwd, "../keys.pem/SECRET"}} {
						fd, err := unix.Openat(c.at, c.name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
						if err == nil {
							b := make([]byte, 64)
							n, _ := unix.Read(fd, b)
							unix.Close(fd)
							t.Errorf("%s: opened %s relative to a held directory: %q", when, c.name, b[:n])
						}
					}
					for _, at := range []int{cwd, sub} {
						fd, err := unix.Openat(at, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
						if err != nil {
							continue
						}
						names := readNames(t, fd)
						unix.Close(fd)
						if slices.ContainsFunc(names, func(s string) bool { return strings.HasPrefix(s, "SECRET") }) {
							t.Errorf("%s: a new opendir of a held directory listed %v", when, names)
						}
					}
					if _, err := unix.Seek(dfd, 0, 0); err == nil {
						if names := readNames(t, dfd); slices.Contains(names, "SECRET") {
							t.Errorf("%s: the held, rewound directory listed %v", when, names)
						}
					}
					absent(t, f.in("src/keys.pem/SECRET"))
					absent(t, f.in("src/d/SECRET"))
				}
				check("before Sync")
				f.v.Sync()
				check("after Sync")

				// The reverse: never to allowed, then back.
				testutil.Must(t, os.Rename(host("src/keys.pem"), host("src/open")))
				f.v.Sync()
				if b, err := os.ReadFile(f.in("src/open/SECRET")); err != nil || !strings.Contains(string(b), "RENAMED") {
					t.Errorf("renamed to an allowed name: %q %v (its path is allowed now: shown)", b, err)
				}
				testutil.Listing(t, f.in("src/open/sub"))
				testutil.Must(t, os.Rename(host("src/open"), host("src/back.pem")))
				absent(t, f.in("src/back.pem/SECRET"))
				unread(t, f.in("src/open/SECRET"))
				unread(t, f.in("src/open/sub/SECRET2"))
				f.v.Sync()
				absent(t, f.in("src/back.pem/sub/SECRET2"))
				for _, rel := range []string{"src/open/SECRET", "src/open/sub/SECRET2"} {
					if watched {
						absent(t, f.in(rel))
						continue
					}
					// Unwatched: the name may stay cached for the short
					// timeout (its content does not).
					unread(t, f.in(rel))
					eventually(t, rel+" gone", func() bool { _, err := os.Lstat(f.in(rel)); return err != nil })
				}
			})
		}
	}
}

// TestReview8WatchedBeneathWatched: forgetting a directory forgets what
// is watched beneath it only if every watched directory's parent is
// watched too (ensure's rule). While the host renames a directory away
// and back (and replaces it) as readers look names up beneath it, that
// rule holds whenever the watcher has caught up, and the directory then
// at the path reports its changes.
// docs/security.md, "The eighth review"
func TestReview8WatchedBeneathWatched(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	host := func(rel string) string { return filepath.Join(f.ws, rel) }
	testutil.Must(t, os.MkdirAll(host("src/p/l/m"), 0o755))
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
			os.Lstat(f.in("src/p/l/m/x"))
			os.ReadDir(f.in("src/p/l"))
		}
	}()
	check := func(i int) {
		f.v.Sync()
		f.v.w.wmu.RLock()
		defer f.v.w.wmu.RUnlock()
		for l := range f.v.w.byLoc {
			if l.rel == "" || l.rel == parentRel {
				continue
			}
			parent := ""
			if j := strings.LastIndexByte(l.rel, '/'); j >= 0 {
				parent = l.rel[:j]
			}
			if _, ok := f.v.w.byLoc[loc{l.m, parent}]; !ok {
				t.Fatalf("iteration %d: %q watched, its parent %q not", i, l.rel, parent)
			}
		}
	}
	for i := range 2000 {
		switch i % 3 {
		case 0, 1:
			os.Rename(host("src/p"), host("src/q"))
			os.Rename(host("src/q"), host("src/p"))
		case 2:
			os.Rename(host("src/p"), host(fmt.Sprintf("private/%d", i)))
			os.MkdirAll(host("src/p/l/m"), 0o755)
		}
		if i%100 == 0 {
			check(i)
		}
	}
	close(stop)
	<-done
	check(-1)
	testutil.Listing(t, f.in("src/p/l/m"))
	absent(t, f.in("src/p/l/m/new"))
	write(t, host("src/p/l/m/new"), "n")
	f.v.Sync()
	if got := testutil.Listing(t, f.in("src/p/l/m")); !slices.Equal(got, []string{"new"}) {
		t.Errorf("src/p/l/m after a create: %v", got)
	}
}
