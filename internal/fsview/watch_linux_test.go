package fsview

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

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
			check("temp name gone", listing(t, f.in("src")), []string{"a.py"})
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
			check("created", listing(t, f.in("src")), []string{"a.py", "b.py"})
			testutil.Must(t, os.Remove(host("src/b.py")))
			f.v.Sync()
			check("removed", listing(t, f.in("src")), []string{"a.py"})
			absent(t, f.in("src/b.py"))
			absent(t, f.in("src/id.pem"))
			// A cached directory renamed to a never name, and its
			// contents: gone under both names.
			testutil.Must(t, os.MkdirAll(host("src/keys/deep"), 0o755))
			write(t, host("src/keys/deep/k"), "SLUICE-SECRET-MOVED\n")
			check("before the move", read("src/keys/deep/k"), "SLUICE-SECRET-MOVED\n")
			check("listed", listing(t, f.in("src/keys/deep")), []string{"k"})
			testutil.Must(t, os.RemoveAll(host("private")))
			testutil.Must(t, os.Rename(host("src/keys"), host("private")))
			f.v.Sync()
			absent(t, f.in("src/keys/deep/k"))
			absent(t, f.in("private/deep/k"))
			check("src after the move", listing(t, f.in("src")), []string{"a.py"})
			// A new *.pem at depth 5 in cached directories.
			testutil.Must(t, os.MkdirAll(host("src/a/b/c/d"), 0o755))
			f.v.Sync()
			check("deep dir", listing(t, f.in("src/a/b/c/d")), []string(nil))
			write(t, host("src/a/b/c/d/id.pem"), "SLUICE-SECRET-PEM\n")
			write(t, host("src/a/b/c/d/ok"), "ok\n")
			f.v.Sync()
			check("deep dir after", listing(t, f.in("src/a/b/c/d")), []string{"ok"})
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
			check("new m", listing(t, f.in("src/m")), []string{"y"})
			check("n", read("src/n/x"), "x\n")
			absent(t, f.in("src/m/x"))
			write(t, host("src/n/z"), "z\n")
			f.v.Sync()
			check("n after a create (its watch followed the rename)", listing(t, f.in("src/n")), []string{"x", "z"})
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
		if got := listing(t, f.in("src")); !slices.Equal(got, want) {
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
			if got := listing(t, f.in("tree/d01")); !slices.Contains(got, "new") {
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
	listing(t, f.in("src"))
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
	if got := listing(t, f.in("src")); !slices.Equal(got, []string{"a.py", "after"}) {
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
