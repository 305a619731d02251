package changeset

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testutil"
)

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(h[:])
}

// upperDir makes an empty upper dir on a tmpfs of its own (trusted
// xattrs, whiteouts) and returns it held O_PATH.
func upperDir(t *testing.T) (string, func() *os.File) {
	t.Helper()
	testutil.RequireRoot(t)
	dir := t.TempDir()
	testutil.Must(t, unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"))
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	up := filepath.Join(dir, "upper")
	testutil.Must(t, os.Mkdir(up, 0o755))
	return up, func() *os.File {
		fd, err := unix.Open(up, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), up)
		t.Cleanup(func() { f.Close() })
		return f
	}
}

func write(t *testing.T, p, s string, mode uint32) {
	t.Helper()
	testutil.Must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	testutil.Must(t, os.WriteFile(p, []byte(s), 0o600))
	testutil.Must(t, unix.Chmod(p, mode)) // raw bits: os.FileMode spells set-id otherwise
}

func TestReadEntries(t *testing.T) {
	up, open := upperDir(t)
	write(t, filepath.Join(up, "a.txt"), "edited\n", 0o644)
	write(t, filepath.Join(up, "sub/new.go"), "package x\n", 0o600)
	testutil.Must(t, os.Mkdir(filepath.Join(up, "made"), 0o750))
	testutil.Must(t, unix.Mknod(filepath.Join(up, "gone"), unix.S_IFCHR|0, 0))
	testutil.Must(t, unix.Mknod(filepath.Join(up, "sub/gone2"), unix.S_IFCHR|0, 0))
	testutil.Must(t, os.Mkdir(filepath.Join(up, "op"), 0o755))
	testutil.Must(t, unix.Setxattr(filepath.Join(up, "op"), "trusted.overlay.opaque", []byte("y"), 0))
	// Harmless overlay bookkeeping passes.
	testutil.Must(t, unix.Setxattr(filepath.Join(up, "sub"), "trusted.overlay.impure", []byte("y"), 0))
	testutil.Must(t, os.Chmod(filepath.Join(up, "sub"), 0o755))
	got, err := Read(open(), 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Path: "a.txt", Kind: File, Mode: 0o644, Size: 7, SHA256: sum("edited\n")},
		{Path: "gone", Kind: Whiteout},
		{Path: "made", Kind: Dir, Mode: 0o750},
		{Path: "op", Kind: Dir, Opaque: true, Mode: 0o755},
		{Path: "sub", Kind: Dir, Mode: 0o755},
		{Path: "sub/gone2", Kind: Whiteout},
		{Path: "sub/new.go", Kind: File, Mode: 0o600, Size: 10, SHA256: sum("package x\n")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	if _, err := Read(open(), 6); !errors.Is(err, ErrTooManyEntries) {
		t.Fatalf("7 entries, max 6: %v", err)
	}
	f, err := Open(open(), "sub/new.go")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	n, _ := f.Read(b)
	f.Close()
	if string(b[:n]) != "package x\n" {
		t.Fatalf("Open read %q", b[:n])
	}
	empty, open2 := upperDir(t)
	_ = empty
	if got, err := Read(open2(), 0); err != nil || len(got) != 0 {
		t.Fatalf("empty layer: %v %v", got, err)
	}
}

func TestReadRefuses(t *testing.T) {
	cases := []struct {
		name, path, why string
		make            func(t *testing.T, up string)
	}{
		{"symlink", "d/l", "symlink", func(t *testing.T, up string) {
			testutil.Must(t, os.Mkdir(filepath.Join(up, "d"), 0o755))
			testutil.Must(t, os.Symlink("/etc/passwd", filepath.Join(up, "d/l")))
		}},
		{"fifo", "f", "FIFO", func(t *testing.T, up string) {
			testutil.Must(t, unix.Mkfifo(filepath.Join(up, "f"), 0o644))
		}},
		{"socket", "s", "socket", func(t *testing.T, up string) {
			testutil.Must(t, unix.Mknod(filepath.Join(up, "s"), unix.S_IFSOCK|0o644, 0))
		}},
		{"chardev", "null", "device", func(t *testing.T, up string) {
			testutil.Must(t, unix.Mknod(filepath.Join(up, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		}},
		{"blockdev", "blk", "device", func(t *testing.T, up string) {
			testutil.Must(t, unix.Mknod(filepath.Join(up, "blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))))
		}},
		{"hardlink", "a", "hard link", func(t *testing.T, up string) {
			write(t, filepath.Join(up, "a"), "x", 0o644)
			testutil.Must(t, os.Link(filepath.Join(up, "a"), filepath.Join(up, "b")))
		}},
		{"setuid", "x/run", "set-id", func(t *testing.T, up string) {
			write(t, filepath.Join(up, "x/run"), "#!/bin/sh\n", 0o4755)
		}},
		{"setgid-file", "run", "set-id", func(t *testing.T, up string) {
			write(t, filepath.Join(up, "run"), "#!/bin/sh\n", 0o2755)
		}},
		{"setgid-dir", "g", "set-id", func(t *testing.T, up string) {
			testutil.Must(t, os.Mkdir(filepath.Join(up, "g"), 0o755))
			testutil.Must(t, unix.Chmod(filepath.Join(up, "g"), 0o2755))
		}},
		{"redirect", "d", "redirect", func(t *testing.T, up string) {
			testutil.Must(t, os.Mkdir(filepath.Join(up, "d"), 0o755))
			testutil.Must(t, unix.Setxattr(filepath.Join(up, "d"), "trusted.overlay.redirect", []byte("/other"), 0))
		}},
		{"metacopy", "m", "metacopy", func(t *testing.T, up string) {
			write(t, filepath.Join(up, "m"), "", 0o644)
			testutil.Must(t, unix.Setxattr(filepath.Join(up, "m"), "trusted.overlay.metacopy", nil, 0))
		}},
		{"opaque-x", "o", "opaque", func(t *testing.T, up string) {
			testutil.Must(t, os.Mkdir(filepath.Join(up, "o"), 0o755))
			testutil.Must(t, unix.Setxattr(filepath.Join(up, "o"), "trusted.overlay.opaque", []byte("x"), 0))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			up, open := upperDir(t)
			write(t, filepath.Join(up, "ok.txt"), "fine", 0o644)
			c.make(t, up)
			_, err := Read(open(), 100)
			var bad *BadEntryError
			if !errors.As(err, &bad) {
				t.Fatalf("want a BadEntryError, got %v", err)
			}
			if bad.Path != c.path || !strings.Contains(bad.Why, c.why) || !strings.Contains(err.Error(), c.path) {
				t.Fatalf("got %q (path %q why %q), want path %q why ~%q", err, bad.Path, bad.Why, c.path, c.why)
			}
		})
	}
}

func TestOpenRefuses(t *testing.T) {
	up, open := upperDir(t)
	write(t, filepath.Join(up, "d/f"), "x", 0o644)
	testutil.Must(t, os.Symlink("d", filepath.Join(up, "l")))
	testutil.Must(t, os.Link(filepath.Join(up, "d/f"), filepath.Join(up, "h")))
	testutil.Must(t, unix.Mkfifo(filepath.Join(up, "p"), 0o644))
	write(t, filepath.Join(up, "e/g"), "y", 0o644)
	testutil.Must(t, os.Symlink("e", filepath.Join(up, "l2")))
	testutil.Must(t, os.Symlink("e/g", filepath.Join(up, "l3")))
	if f, err := Open(open(), "e/g"); err != nil {
		t.Fatalf("Open(e/g): %v", err)
	} else {
		f.Close()
	}
	for _, p := range []string{"l2/g", "l3", "l/f", "h", "d/f", "../upper/d/f", "/d/f", "d/../d/f", "", "p", "d"} {
		f, err := Open(open(), p)
		if err == nil {
			f.Close()
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}
