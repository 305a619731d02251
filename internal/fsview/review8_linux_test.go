package fsview

// Review 8: the view's kernel caches, attacked (docs/security.md, "The
// eighth review").

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

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

// TestReview8HeldCwdRenamedToNever: a container's cwd (here an fd of
// the directory, opened O_PATH as a cwd is held, and one opened for
// reading) sits in an allowed directory the host renames to a never
// name, and fills it with a secret: nothing is read, listed or looked up
// through it afterwards, relative to it or through "..", before Sync and
// after. And the reverse: a never directory renamed to an allowed name
// shows (its path is allowed now), and once renamed back is gone again.
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
				listing(t, f.in("src/open/sub"))
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

// readNames lists the directory fd from where it stands, with getdents.
func readNames(t *testing.T, fd int) []string {
	t.Helper()
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil || n <= 0 {
			return names
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// TestReview8DeepNeverUnderCachedListing: a tree five deep, walked (names
// and attributes cached, listings kept by the kernel), then the host adds
// a never file and a never directory at depth five and renames a cached
// directory under it to a never name. Before Sync (the events may not be
// read) no never name is listed, looked up or read; after it, the
// listings are the host's less the never names.
func TestReview8DeepNeverUnderCachedListing(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	host := func(rel string) string { return filepath.Join(f.ws, rel) }
	deep := "src/a/b/c/d"
	testutil.Must(t, os.MkdirAll(host(deep+"/e"), 0o755))
	write(t, host(deep+"/ok"), "ok\n")
	write(t, host(deep+"/e/inner"), "inner\n")
	walkTree(t, f.in("src"))
	walkTree(t, f.in("src"))
	f.v.w.mu.Lock()
	write(t, host(deep+"/id.pem"), "SLUICE-SECRET-PEM\n")
	testutil.Must(t, os.MkdirAll(host(deep+"/k.pem"), 0o755))
	write(t, host(deep+"/k.pem/x"), "SLUICE-SECRET-IN-PEM-DIR\n")
	testutil.Must(t, os.Rename(host(deep+"/e"), host(deep+"/e.pem")))
	for _, rel := range []string{deep + "/id.pem", deep + "/k.pem/x", deep + "/e.pem/inner"} {
		absent(t, f.in(rel))
	}
	for _, dir := range []string{deep, "src/a/b/c"} {
		for _, name := range listing(t, f.in(dir)) {
			if strings.HasSuffix(name, ".pem") {
				t.Errorf("before the events are read: %s lists %s", dir, name)
			}
		}
	}
	unread(t, f.in(deep+"/e/inner"))
	f.v.w.mu.Unlock()
	f.v.Sync()
	if got := listing(t, f.in(deep)); !slices.Equal(got, []string{"ok"}) {
		t.Errorf("%s after Sync: %v", deep, got)
	}
	absent(t, f.in(deep+"/e/inner"))
	absent(t, f.in(deep+"/e.pem/inner"))
}

// TestReview8RevokedUidCachedNamesOnly: once a container's uid is
// revoked (the container destroyed; the uid may go to another tool's
// container next), what the kernel cached while it ran (names and
// attributes, listings, a symlink looked up) yields no content to that
// uid: open, opendir, readlink, exec and statfs reach the view and are
// refused; a lookup of a name the kernel did not cache is refused too.
// What a cached lookup or stat shows is the names and attributes of what
// the tool's containers looked up, as docs/security.md says.
func TestReview8RevokedUidCachedNamesOnly(t *testing.T) {
	ws, v := mountCapped(t, 16)
	const uid = 0x7F030009
	in := func(rel string) string { return filepath.Join(v.Path(0), rel) }
	testutil.Must(t, os.Symlink("f", filepath.Join(ws, "l")))
	write(t, filepath.Join(ws, "d/x"), "x\n")
	testutil.Must(t, os.Chmod(filepath.Join(ws, "d/x"), 0o755))
	write(t, filepath.Join(ws, "d/never-looked-up"), "n\n")
	v.Admit(uid)
	asFsuid(uid, func() {
		os.ReadFile(in("f"))
		os.Readlink(in("l"))
		os.ReadDir(in("d")) // readdirplus: names and attributes of d's entries
		os.ReadFile(in("d/x"))
	})
	v.Revoke(uid)
	asFsuid(uid, func() {
		for _, p := range []string{"f", "l", "d/x"} {
			fd, err := unix.Open(in(p), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
				t.Errorf("revoked: opened %s", p)
			}
		}
		if _, err := os.ReadDir(in("d")); err == nil {
			t.Errorf("revoked: listed d")
		}
		if target, err := os.Readlink(in("l")); err == nil {
			t.Errorf("revoked: readlink l = %q", target)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(in("d"), &st); err == nil {
			t.Errorf("revoked: statfs answered")
		}
		if _, err := os.Lstat(in("d/other")); !errors.Is(err, os.ErrPermission) {
			t.Errorf("revoked: lookup of an uncached name: %v, want EACCES", err)
		}
		if err := unix.Access(in("d/x"), unix.X_OK); err == nil {
			// access(2) is answered from cached attributes: no content.
			t.Logf("revoked: access(d/x, X_OK) answered from the cache (names and attributes only)")
		}
	})
}

// TestReview8NoENOSYSFromOpen: an OPEN answered ENOSYS makes the kernel
// stop sending OPEN for the whole connection (FUSE_NO_OPEN_SUPPORT, which
// go-fuse offers): every later open of every file would skip the view's
// resolution and checks. No refusal of the view's may be ENOSYS: a file
// opened for writing, a never name, a non-admitted caller, one past its
// cap, a replaced file; and after them all an open of a never name and a
// read by a non-admitted uid still reach the view.
func TestReview8NoENOSYSFromOpen(t *testing.T) {
	ws, v := mountCapped(t, 2)
	const uid = 0x7F03000A
	in := func(rel string) string { return filepath.Join(v.Path(0), rel) }
	write(t, filepath.Join(ws, "id.pem"), "SLUICE-SECRET-PEM\n")
	try := func(p string, flags int) {
		fd, err := unix.Open(p, flags|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		if errors.Is(err, syscall.ENOSYS) {
			t.Errorf("open %s (%#x): ENOSYS", p, flags)
		}
	}
	asFsuid(uid, func() { try(in("f"), unix.O_RDONLY) })
	v.Admit(uid)
	asFsuid(uid, func() {
		try(in("f"), unix.O_WRONLY)
		try(in("f"), unix.O_RDWR|unix.O_TRUNC)
		try(in("id.pem"), unix.O_RDONLY)
		var fds []int
		for range 4 {
			fd, err := unix.Open(in("f"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if errors.Is(err, syscall.ENOSYS) {
				t.Errorf("past the cap: ENOSYS")
			}
			if err == nil {
				fds = append(fds, fd)
			}
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	write(t, filepath.Join(ws, "f.new"), "new\n")
	testutil.Must(t, os.Rename(filepath.Join(ws, "f.new"), filepath.Join(ws, "f")))
	try(in("f"), unix.O_RDONLY)
	v.Revoke(uid)
	asFsuid(uid, func() {
		if b, err := os.ReadFile(in("f")); err == nil {
			t.Errorf("after the refusals, a revoked uid read f: %q (OPEN no longer reaches the view?)", b)
		}
	})
	absent(t, in("id.pem"))
}

// TestReview8WatchedBeneathWatched: forgetting a directory forgets what
// is watched beneath it only if every watched directory's parent is
// watched too (ensure's rule). While the host renames a directory away
// and back (and replaces it) as readers look names up beneath it, that
// rule holds whenever the watcher has caught up, and the directory then
// at the path reports its changes.
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
	listing(t, f.in("src/p/l/m"))
	absent(t, f.in("src/p/l/m/new"))
	write(t, host("src/p/l/m/new"), "n")
	f.v.Sync()
	if got := listing(t, f.in("src/p/l/m")); !slices.Equal(got, []string{"new"}) {
		t.Errorf("src/p/l/m after a create: %v", got)
	}
}

// TestReview8SymlinkRetargeted: a symlink looked up and followed through
// the view (its name and attributes cached) that the host points
// elsewhere, in place (removed and made again) or by a rename over it:
// before Sync the kernel may still hold the old link's entry, yet its
// target is read from the host at every follow (the view never lets the
// kernel cache a link's target), and what it leads to is looked up in the
// view again: a never name stays hidden.
func TestReview8SymlinkRetargeted(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	host := func(rel string) string { return filepath.Join(f.ws, rel) }
	testutil.Must(t, os.Symlink("a.py", host("src/l")))
	if b, err := os.ReadFile(f.in("src/l")); err != nil || string(b) != "print('a')\n" {
		t.Fatalf("through the link: %q %v", b, err)
	}
	for i, target := range []string{"../private/key", ".env", "../src/.env"} {
		if i%2 == 0 {
			testutil.Must(t, os.Remove(host("src/l")))
			testutil.Must(t, os.Symlink(target, host("src/l")))
		} else {
			testutil.Must(t, os.Symlink(target, host("src/l.new")))
			testutil.Must(t, os.Rename(host("src/l.new"), host("src/l")))
		}
		if got, err := os.Readlink(f.in("src/l")); err != nil || got != target {
			t.Errorf("retargeted to %s, before Sync: readlink %q %v", target, got, err)
		}
		unread(t, f.in("src/l"))
		f.v.Sync()
		unread(t, f.in("src/l"))
		testutil.Must(t, os.Remove(host("src/l")))
		testutil.Must(t, os.Symlink("a.py", host("src/l")))
		f.v.Sync()
		if b, err := os.ReadFile(f.in("src/l")); err != nil || string(b) != "print('a')\n" {
			t.Fatalf("back to a.py: %q %v", b, err)
		}
	}
}

// TestReview8RemoteChangesNotCachedLong: inotify reports only changes
// made through this kernel. A workspace on a file system that others
// change too (NFS, SMB, 9p, or a FUSE one: virtiofs, the usual share of a
// development VM, sshfs) is edited where no event is raised: the
// operator's own save on the VM's host. Its directories must be served
// as unwatched ones (names and attributes for the short timeout, no kept
// listing), not cached for 10 minutes. Here the workspace is a FUSE
// loopback of a directory changed beneath it.
func TestReview8RemoteChangesNotCachedLong(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("mounts FUSE: run as root")
	}
	base := t.TempDir()
	backing, ws, mnt := filepath.Join(base, "backing"), filepath.Join(base, "ws"), filepath.Join(base, "mnt")
	for _, d := range []string{filepath.Join(backing, "src"), ws, mnt} {
		testutil.Must(t, os.MkdirAll(d, 0o755))
	}
	write(t, filepath.Join(backing, "src/a"), "a\n")
	lroot, err := gofs.NewLoopbackRoot(backing)
	testutil.Must(t, err)
	lsrv, err := gofs.Mount(ws, lroot, &gofs.Options{MountOptions: fuse.MountOptions{AllowOther: true, DirectMount: true, FsName: "remote-ish"}})
	testutil.Must(t, err)
	t.Cleanup(func() { lsrv.Unmount() })
	root, err := securefs.OpenRoot(ws, securefs.ModeAuto)
	testutil.Must(t, err)
	v, err := Mount(mnt, []Source{{Root: root}}, Options{Hide: never, Timeout: 50 * time.Millisecond})
	testutil.Must(t, err)
	t.Cleanup(func() {
		v.Close()
		<-v.Done()
	})
	in := func(rel string) string { return filepath.Join(v.Path(0), rel) }
	if got := listing(t, in("src")); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("src: %v", got)
	}
	os.Lstat(in("src/a"))
	// Changed where this kernel raises no event.
	write(t, filepath.Join(backing, "src/b"), "b\n")
	write(t, filepath.Join(backing, "src/a"), "a, longer now\n")
	v.Sync()
	eventually(t, "a change made beneath the workspace's file system", func() bool {
		fi, err := os.Lstat(in("src/a"))
		return err == nil && fi.Size() == int64(len("a, longer now\n")) && slices.Equal(listing(t, in("src")), []string{"a", "b"})
	})
	if n := v.Watches(); n != 0 {
		t.Errorf("%d directories of a FUSE workspace watched", n)
	}
}

// TestReview8RenamedAwayAndBackListsWhole: a directory opened (its
// listing to be kept by the kernel), renamed away before it is read, so
// that the read lists nothing (its path names no directory), then renamed
// back: the same directory at the same path, the same node. The empty
// read must not be kept as the node's whole listing: after Sync every
// opendir lists the directory's names.
func TestReview8RenamedAwayAndBackListsWhole(t *testing.T) {
	for _, held := range []string{"unread", "partly read"} {
		t.Run(held, func(t *testing.T) {
			f := newView(t, securefs.ModeOpenat2)
			host := func(rel string) string { return filepath.Join(f.ws, rel) }
			testutil.Must(t, os.MkdirAll(host("src/d"), 0o755))
			var want []string
			n := 3
			if held == "partly read" {
				n = 2000 // more than one READDIR reply
			}
			for i := range n {
				name := fmt.Sprintf("file-with-a-longish-name-%04d", i)
				write(t, host("src/d/"+name), "x")
				want = append(want, name)
			}
			fd, err := unix.Open(f.in("src/d"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			testutil.Must(t, err)
			defer unix.Close(fd)
			if held == "partly read" {
				buf := make([]byte, 4096)
				if _, err := unix.Getdents(fd, buf); err != nil {
					t.Fatal(err)
				}
			}
			testutil.Must(t, os.Rename(host("src/d"), host("src/elsewhere")))
			f.v.Sync()
			readNames(t, fd)
			testutil.Must(t, os.Rename(host("src/elsewhere"), host("src/d")))
			f.v.Sync()
			for i := range 2 {
				if got := listing(t, f.in("src/d")); !slices.Equal(got, want) {
					t.Errorf("listing %d after the directory came back: %d names, want %d", i, len(got), len(want))
				}
			}
		})
	}
}

// TestReview8DirAttrsFreshAfterSync: a directory looked up but never
// looked into (ls -l of its parent, a stat: readdirplus and lookups do
// that) has attributes that change with what is inside it: mtime, ctime,
// nlink. Only its own watch reports a name made inside it; its parent's
// reports its name and its own chmod. Once Sync returns, its attributes
// must be the host's, as git's untracked cache (core.untrackedCache,
// feature.manyFiles) and make read a directory's mtime to decide whether
// to look again.
func TestReview8DirAttrsFreshAfterSync(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	host := func(rel string) string { return filepath.Join(f.ws, rel) }
	for _, d := range []string{"src/d", "src/e"} {
		testutil.Must(t, os.MkdirAll(host(d), 0o755))
	}
	listing(t, f.in("src")) // readdirplus: d and e looked up, neither listed
	os.Lstat(f.in("src/d"))
	os.Lstat(f.in("src/e"))
	// Names made inside them: their mtime (and d's nlink) change, and no
	// event reaches their parent's watch. Polled until the host's own
	// mtime moved (a coarse timestamp may need a tick).
	before, err := os.Lstat(host("src/d"))
	testutil.Must(t, err)
	for i := 0; ; i++ {
		testutil.Must(t, os.Mkdir(host(fmt.Sprintf("src/d/sub%d", i)), 0o755))
		write(t, host(fmt.Sprintf("src/e/new%d", i)), "n")
		if fi, err := os.Lstat(host("src/d")); err == nil && !fi.ModTime().Equal(before.ModTime()) {
			break
		}
	}
	f.v.Sync()
	for _, d := range []string{"src/d", "src/e"} {
		want, err := os.Lstat(host(d))
		testutil.Must(t, err)
		got, err := os.Lstat(f.in(d))
		testutil.Must(t, err)
		var wst, gst unix.Stat_t
		unix.Lstat(host(d), &wst)
		unix.Lstat(f.in(d), &gst)
		if !got.ModTime().Equal(want.ModTime()) || gst.Nlink != wst.Nlink {
			t.Errorf("%s after Sync: mtime %v nlink %d, host %v %d", d, got.ModTime(), gst.Nlink, want.ModTime(), wst.Nlink)
		}
	}
}

// TestReview8SyncAfterCloseReadsNothing: once a view's server has
// stopped (its last container gone after a reload detached it), its
// inotify fd is closed, and the fd's number may be handed to anything
// sluiced opens next: a client's connection, a container's pipe. A Sync
// then (a box of the view run late) must not read from whatever holds
// that number now.
func TestReview8SyncAfterCloseReadsNothing(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	f.v.w.mu.Lock()
	num := f.v.w.fd
	f.v.w.mu.Unlock()
	f.v.Close()
	<-f.v.Done()
	var p [2]int
	testutil.Must(t, unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK))
	defer unix.Close(p[1])
	// What sluiced opened next got the number.
	testutil.Must(t, unix.Dup3(p[0], num, unix.O_CLOEXEC))
	unix.Close(p[0])
	defer unix.Close(num)
	msg := []byte("a client's request, not inotify events")
	_, err := unix.Write(p[1], msg)
	testutil.Must(t, err)
	f.v.Sync()
	if n, err := unix.IoctlGetInt(num, unix.TIOCINQ); err != nil || n != len(msg) {
		t.Errorf("after Sync on a closed view, the fd that took its number holds %d bytes (%v), want %d", n, err, len(msg))
	}
}

// TestReview8MountFailureReturns: a view that cannot be mounted (here its
// directory is missing) returns its error; the watcher made for it,
// whose loop never started, must not wait for that loop to end.
func TestReview8MountFailureReturns(t *testing.T) {
	ws := t.TempDir()
	root, err := securefs.OpenRoot(ws, securefs.ModeAuto)
	testutil.Must(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := Mount(filepath.Join(ws, "missing", "mnt"), []Source{{Root: root}}, Options{Hide: never})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("mounted on a missing directory")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Mount on a missing directory did not return within 30 s")
	}
}

// TestReview8CwdInReplacedDirListsPath: a process sits in a directory
// (its cwd, here an O_PATH fd) that the host replaces: renamed away and
// a new one made at the path. A node is a path: a lookup through the cwd
// finds the new directory's names, and so must a listing of ".", after
// Sync, not the names the kernel had cached of the directory that left.
func TestReview8CwdInReplacedDirListsPath(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	host := func(rel string) string { return filepath.Join(f.ws, rel) }
	testutil.Must(t, os.MkdirAll(host("src/d"), 0o755))
	write(t, host("src/d/a"), "a")
	listing(t, f.in("src/d"))
	cwd, err := unix.Open(f.in("src/d"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	testutil.Must(t, err)
	defer unix.Close(cwd)
	testutil.Must(t, os.Rename(host("src/d"), host("src/e")))
	testutil.Must(t, os.Mkdir(host("src/d"), 0o755))
	write(t, host("src/d/new"), "n")
	f.v.Sync()
	fd, err := unix.Openat(cwd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	testutil.Must(t, err)
	defer unix.Close(fd)
	if got := readNames(t, fd); !slices.Contains(got, "new") || slices.Contains(got, "a") {
		t.Errorf("ls . in a replaced cwd: %v, want the new directory's [new]", got)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d/new", cwd)); err != nil || string(b) != "n" {
		t.Errorf("new through the cwd: %q %v", b, err)
	}
}
