package fsview

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

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

func listing(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
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
			if got := strings.Join(listing(t, f.in("src")), ","); got != "a.py" {
				t.Errorf("readdir src: %s", got)
			}
			if got := strings.Join(listing(t, f.v.Path(0)), ","); got != "cfg.txt,src" {
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
			if got := listing(t, f.in("src/a/b/c/d")); len(got) != 0 {
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
	if got := strings.Join(listing(t, f.in("src")), ","); got != "a.py" {
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
