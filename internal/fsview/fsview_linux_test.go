package fsview

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
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

// never is the glob set the tests hide, matched as authz matches it:
// ".env" and "*.pem" by base name, "private/**" by path.
func never(_ int, rel string) bool {
	base := path(rel)
	if base == ".env" || strings.HasSuffix(base, ".pem") {
		return true
	}
	return rel == "private" || strings.HasPrefix(rel, "private/")
}

func path(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[i+1:]
	}
	return rel
}

type fixture struct {
	ws, out, mnt string
	v            *View
}

func newView(t *testing.T, mode securefs.Mode) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("fsview tests mount FUSE: run as root (CI does)")
	}
	base := t.TempDir()
	f := &fixture{ws: filepath.Join(base, "ws"), out: filepath.Join(base, "outside"), mnt: filepath.Join(base, "mnt")}
	for _, d := range []string{f.ws, f.out, f.mnt, filepath.Join(f.ws, "src"), filepath.Join(f.ws, "private")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(f.ws, "src", "a.py"), "print('a')\n")
	write(t, filepath.Join(f.ws, "src", ".env"), "SLUICE-SECRET-ENV\n")
	write(t, filepath.Join(f.ws, "private", "key"), "SLUICE-SECRET-KEY\n")
	write(t, filepath.Join(f.ws, "cfg.txt"), "cfg v1\n")
	write(t, filepath.Join(f.out, "secret"), "SLUICE-SECRET-OUTSIDE\n")
	wsRoot, err := securefs.OpenRoot(f.ws, mode)
	if err != nil {
		t.Fatal(err)
	}
	fileRoot, err := securefs.OpenRoot(f.ws, mode)
	if err != nil {
		t.Fatal(err)
	}
	v, err := Mount(f.mnt, []Source{{Root: wsRoot}, {Root: fileRoot, Name: "cfg.txt"}}, Options{Hide: never, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.v = v
	t.Cleanup(func() {
		v.Close()
		select {
		case <-v.Done():
		case <-time.After(10 * time.Second):
			t.Error("view server did not stop after Close")
		}
	})
	t.Logf("passthrough: %v", v.Passthrough)
	return f
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// in is a path inside the view's mount 0.
func (f *fixture) in(rel string) string { return filepath.Join(f.v.Path(0), rel) }

func absent(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: want ENOENT, got %v", p, err)
	}
	if b, err := os.ReadFile(p); err == nil {
		t.Errorf("%s: read %q", p, b)
	}
}

// eventually polls cond until it holds or the deadline passes: host edits
// show once the kernel's cache times out (50 ms here).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := testutil.Poll(5*time.Second, func() error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	}); err != nil {
		t.Fatalf("%s: not within 5 s", what)
	}
}

func modes() []securefs.Mode { return []securefs.Mode{securefs.ModeOpenat2, securefs.ModeFallback} }

func TestViewShowsWhatFileToolsWould(t *testing.T) {
	for _, mode := range modes() {
		t.Run(mode.String(), func(t *testing.T) {
			f := newView(t, mode)
			if b, err := os.ReadFile(f.in("src/a.py")); err != nil || string(b) != "print('a')\n" {
				t.Fatalf("read src/a.py: %q %v", b, err)
			}
			if b, err := os.ReadFile(f.v.Path(1)); err != nil || string(b) != "cfg v1\n" {
				t.Fatalf("file mount: %q %v", b, err)
			}
			absent(t, f.in("src/.env"))
			absent(t, f.in("private"))
			absent(t, f.in("private/key"))
			if got := strings.Join(testutil.Listing(t, f.in("src")), ","); got != "a.py" {
				t.Errorf("readdir src: %s", got)
			}
			if got := strings.Join(testutil.Listing(t, f.v.Path(0)), ","); got != "cfg.txt,src" {
				t.Errorf("readdir /: %s", got)
			}
			// The view is read-only.
			if err := os.WriteFile(f.in("src/new"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
				t.Errorf("create in view: %v, want EROFS", err)
			}
			if err := os.WriteFile(f.in("src/a.py"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
				t.Errorf("write in view: %v, want EROFS", err)
			}
		})
	}
}

// TestHostEditsNeverUnmask is the class that broke per-container masks:
// whatever the host does, never-listed names stay absent.
func TestHostEditsNeverUnmask(t *testing.T) {
	for _, mode := range modes() {
		t.Run(mode.String(), func(t *testing.T) {
			f := newView(t, mode)
			absent(t, f.in("src/.env")) // looked up (and refused) once first
			// sed -i: write a temp file, rename it over.
			write(t, filepath.Join(f.ws, "src", ".env.tmp"), "SLUICE-SECRET-ENV2\n")
			if err := os.Rename(filepath.Join(f.ws, "src", ".env.tmp"), filepath.Join(f.ws, "src", ".env")); err != nil {
				t.Fatal(err)
			}
			absent(t, f.in("src/.env"))
			// mv private private.old && cp -a private.old private
			testutil.Must(t, os.Rename(filepath.Join(f.ws, "private"), filepath.Join(f.ws, "private.old")))
			testutil.Must(t, os.MkdirAll(filepath.Join(f.ws, "private"), 0o755))
			write(t, filepath.Join(f.ws, "private", "key"), "SLUICE-SECRET-KEY2\n")
			absent(t, f.in("private/key"))
			// A new *.pem at depth 5, created after the view was made.
			deep := filepath.Join(f.ws, "src", "a", "b", "c", "d")
			testutil.Must(t, os.MkdirAll(deep, 0o755))
			write(t, filepath.Join(deep, "id.pem"), "SLUICE-SECRET-PEM\n")
			eventually(t, "new directories show", func() bool {
				_, err := os.Stat(f.in("src/a/b/c/d"))
				return err == nil
			})
			absent(t, f.in("src/a/b/c/d/id.pem"))
			if got := testutil.Listing(t, f.in("src/a/b/c/d")); len(got) != 0 {
				t.Errorf("listing of d: %v", got)
			}
			// A host edit of an allowed file shows (after the cache timeout).
			write(t, filepath.Join(f.ws, "src", "a.py.tmp"), "print('b')\n")
			testutil.Must(t, os.Rename(filepath.Join(f.ws, "src", "a.py.tmp"), filepath.Join(f.ws, "src", "a.py")))
			eventually(t, "a rewritten file shows its new content", func() bool {
				b, _ := os.ReadFile(f.in("src/a.py"))
				return string(b) == "print('b')\n"
			})
			// The file mount follows a save too.
			write(t, filepath.Join(f.ws, "cfg.new"), "cfg v2\n")
			testutil.Must(t, os.Rename(filepath.Join(f.ws, "cfg.new"), filepath.Join(f.ws, "cfg.txt")))
			eventually(t, "a rewritten file mount shows its new content", func() bool {
				b, _ := os.ReadFile(f.v.Path(1))
				return string(b) == "cfg v2\n"
			})
			// A node is a path: a directory renamed to a never name is not
			// reachable through the name it had.
			testutil.Must(t, os.MkdirAll(filepath.Join(f.ws, "src", "keys"), 0o755))
			write(t, filepath.Join(f.ws, "src", "keys", "k"), "public\n")
			if _, err := os.ReadFile(f.in("src/keys/k")); err != nil {
				t.Fatal(err)
			}
			testutil.Must(t, os.RemoveAll(filepath.Join(f.ws, "private")))
			if err := os.Rename(filepath.Join(f.ws, "src", "keys"), filepath.Join(f.ws, "private")); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(f.ws, "private", "k2"), "SLUICE-SECRET-MOVED\n")
			absent(t, f.in("src/keys/k2"))
			absent(t, f.in("private/k2"))
		})
	}
}

// TestSpecialFilesAbsent: sockets (host services), FIFOs and devices do not
// exist in a view, made before or after it was mounted.
func TestSpecialFilesAbsent(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	l, err := net.Listen("unix", filepath.Join(f.ws, "src", "dev.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := unix.Mkfifo(filepath.Join(f.ws, "src", "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(f.ws, "src", "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"dev.sock", "fifo", "null"} {
		absent(t, f.in("src/"+n))
	}
	if got := strings.Join(testutil.Listing(t, f.in("src")), ","); got != "a.py" {
		t.Errorf("readdir src: %s", got)
	}
	// A regular file replaced by a socket after it was looked up.
	testutil.Must(t, os.Remove(filepath.Join(f.ws, "src", "a.py")))
	l2, err := net.Listen("unix", filepath.Join(f.ws, "src", "a.py"))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if _, err := os.ReadFile(f.in("src/a.py")); err == nil {
		t.Error("opened a socket that replaced a file")
	}
	if c, err := net.Dial("unix", f.in("src/a.py")); err == nil {
		c.Close()
		t.Error("connected to a host socket through the view")
	}
}

// TestSymlinksStayLinks: a link is shown as a link, never followed by the
// daemon; a directory swapped for a link leaves the path dead.
func TestSymlinksStayLinks(t *testing.T) {
	for _, mode := range modes() {
		t.Run(mode.String(), func(t *testing.T) {
			f := newView(t, mode)
			testutil.Must(t, os.Symlink(filepath.Join(f.out, "secret"), filepath.Join(f.ws, "src", "abs")))
			testutil.Must(t, os.Symlink("../../outside/secret", filepath.Join(f.ws, "src", "rel")))
			testutil.Must(t, os.Symlink(".env", filepath.Join(f.ws, "src", "toenv")))
			for name, want := range map[string]string{"abs": filepath.Join(f.out, "secret"), "rel": "../../outside/secret", "toenv": ".env"} {
				got, err := os.Readlink(f.in("src/" + name))
				if err != nil || got != want {
					t.Errorf("readlink %s: %q %v", name, got, err)
				}
			}
			// Followed by the kernel where the view is: "toenv" leads to
			// src/.env, which the view refuses.
			if b, err := os.ReadFile(f.in("src/toenv")); err == nil {
				t.Errorf("read src/.env through a link: %q", b)
			}
			// A directory swapped for a symlink to outside: the old path
			// names the link now, and nothing beneath it resolves.
			if _, err := os.ReadFile(f.in("src/a.py")); err != nil {
				t.Fatal(err)
			}
			testutil.Must(t, os.Rename(filepath.Join(f.ws, "src"), filepath.Join(f.ws, "src.old")))
			// On the host, ws/src -> ../outside is the outside directory;
			// in the view it leads to mnt/outside, which does not exist.
			// Only a daemon that followed the link could read the secret.
			testutil.Must(t, os.Symlink("../outside", filepath.Join(f.ws, "src")))
			write(t, filepath.Join(f.out, "a.py"), "SLUICE-SECRET-SWAPPED\n")
			eventually(t, "the swapped directory shows as a link", func() bool {
				b, err := os.ReadFile(f.in("src/a.py"))
				if strings.Contains(string(b), "SLUICE-SECRET") || err == nil {
					t.Fatalf("read through a swapped-in symlink: %q %v", b, err)
				}
				fi, err := os.Lstat(f.in("src"))
				return err == nil && fi.Mode()&fs.ModeSymlink != 0
			})
		})
	}
}

// TestDiagNamesWhatKeepsAViewServing: a view closed while a bind of it
// is still mounted keeps serving; Diag says it was closed, which uid it
// still admits, and which process's mount table holds it, so that a
// shutdown that finds a view still serving logs its cause. Once the bind
// goes, the server stops.
func TestDiagNamesWhatKeepsAViewServing(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	f.v.Admit(0x7F030020)
	bind := filepath.Join(t.TempDir(), "bind")
	testutil.Must(t, os.Mkdir(bind, 0o755))
	testutil.Must(t, unix.Mount(f.v.Path(0), bind, "", unix.MS_BIND, ""))
	f.v.Close()
	select {
	case <-f.v.Done():
		t.Fatal("the view stopped while a bind of it was mounted")
	default:
	}
	d := f.v.Diag()
	self, err := os.Readlink("/proc/self/ns/mnt")
	testutil.Must(t, err)
	if !d.Closed || !slices.Equal(d.Admitted, []uint32{0x7F030020}) || d.Conn == 0 || d.Waiting > 0 ||
		!slices.ContainsFunc(d.Holders, func(h string) bool { return strings.HasPrefix(h, self+" ") }) {
		t.Errorf("diag: %s", d)
	}
	testutil.Must(t, unix.Unmount(bind, unix.MNT_DETACH))
	<-f.v.Done()
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
// docs/security.md, "The eighth review"
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
		for _, name := range testutil.Listing(t, f.in(dir)) {
			if strings.HasSuffix(name, ".pem") {
				t.Errorf("before the events are read: %s lists %s", dir, name)
			}
		}
	}
	unread(t, f.in(deep+"/e/inner"))
	f.v.w.mu.Unlock()
	f.v.Sync()
	if got := testutil.Listing(t, f.in(deep)); !slices.Equal(got, []string{"ok"}) {
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
// docs/security.md, "The eighth review"
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
// docs/security.md, "The eighth review"
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

// TestReview8SymlinkRetargeted: a symlink looked up and followed through
// the view (its name and attributes cached) that the host points
// elsewhere, in place (removed and made again) or by a rename over it:
// before Sync the kernel may still hold the old link's entry, yet its
// target is read from the host at every follow (the view never lets the
// kernel cache a link's target), and what it leads to is looked up in the
// view again: a never name stays hidden.
// docs/security.md, "The eighth review"
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
// docs/security.md, "The eighth review"
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
	if got := testutil.Listing(t, in("src")); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("src: %v", got)
	}
	os.Lstat(in("src/a"))
	// Changed where this kernel raises no event.
	write(t, filepath.Join(backing, "src/b"), "b\n")
	write(t, filepath.Join(backing, "src/a"), "a, longer now\n")
	v.Sync()
	eventually(t, "a change made beneath the workspace's file system", func() bool {
		fi, err := os.Lstat(in("src/a"))
		return err == nil && fi.Size() == int64(len("a, longer now\n")) && slices.Equal(testutil.Listing(t, in("src")), []string{"a", "b"})
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
// docs/security.md, "The eighth review"
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
				if got := testutil.Listing(t, f.in("src/d")); !slices.Equal(got, want) {
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
// docs/security.md, "The eighth review"
func TestReview8DirAttrsFreshAfterSync(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	host := func(rel string) string { return filepath.Join(f.ws, rel) }
	for _, d := range []string{"src/d", "src/e"} {
		testutil.Must(t, os.MkdirAll(host(d), 0o755))
	}
	testutil.Listing(t, f.in("src")) // readdirplus: d and e looked up, neither listed
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
// docs/security.md, "The eighth review"
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
// docs/security.md, "The eighth review"
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
// docs/security.md, "The eighth review"
func TestReview8CwdInReplacedDirListsPath(t *testing.T) {
	f := newView(t, securefs.ModeOpenat2)
	host := func(rel string) string { return filepath.Join(f.ws, rel) }
	testutil.Must(t, os.MkdirAll(host("src/d"), 0o755))
	write(t, host("src/d/a"), "a")
	testutil.Listing(t, f.in("src/d"))
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
