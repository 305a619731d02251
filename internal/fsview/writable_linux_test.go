package fsview

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
)

// TestWritablePresentation: a mount listed in Options.Writable shows
// files with mode|0666 and directories with mode|0777 and no sticky bit;
// another mount of the same view shows the host's modes; the host's
// files keep theirs, and the view itself stays read-only.
func TestWritablePresentation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("fsview tests mount FUSE: run as root (CI does)")
	}
	base := t.TempDir()
	ws, mnt := filepath.Join(base, "ws"), filepath.Join(base, "mnt")
	for _, d := range []string{ws, mnt, filepath.Join(ws, "d"), filepath.Join(ws, "sticky")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(ws, "f"), "x")
	write(t, filepath.Join(ws, "x"), "x")
	for p, m := range map[string]uint32{"f": 0o600, "x": 0o750, "d": 0o700, "sticky": 0o1755, "": 0o755} {
		if err := unix.Chmod(filepath.Join(ws, p), m); err != nil {
			t.Fatal(err)
		}
	}
	var srcs []Source
	for range 2 {
		root, err := securefs.OpenRoot(ws, securefs.ModeAuto)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, Source{Root: root})
	}
	v, err := Mount(mnt, srcs, Options{Hide: never, Writable: []bool{true}})
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
	for _, c := range []struct {
		p        string
		rw, host uint32
	}{
		{"", unix.S_IFDIR | 0o777, unix.S_IFDIR | 0o755},
		{"f", unix.S_IFREG | 0o666, unix.S_IFREG | 0o600},
		{"x", unix.S_IFREG | 0o776, unix.S_IFREG | 0o750},
		{"d", unix.S_IFDIR | 0o777, unix.S_IFDIR | 0o700},
		{"sticky", unix.S_IFDIR | 0o777, unix.S_IFDIR | 0o1755},
	} {
		for i, want := range []uint32{c.rw, c.host} {
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(v.Path(i), c.p), &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode != want {
				t.Errorf("mount %d: %q shows mode %o, want %o", i, c.p, st.Mode, want)
			}
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(ws, c.p), &st); err != nil || st.Mode != c.host {
			t.Errorf("host %q: mode %o (%v), want %o", c.p, st.Mode, err, c.host)
		}
	}
	if err := os.WriteFile(filepath.Join(v.Path(0), "f"), []byte("y"), 0o644); err == nil {
		t.Error("wrote through a writable-presented view")
	}
}
