package fsview

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
)

// benchFile runs op on a 4 KiB file, src/four_k.txt beneath a directory,
// as each sub-benchmark reaches it: "direct" on the directory itself,
// "view" through a view of it with sandbox.ViewTimeout (1 s) of name and
// attribute caching, as sluiced mounts it. "view-uncached" goes through a
// view whose cache lasts one jiffy, to manyFiles copies in turn, so that
// every name is looked up through the server again: what a tree walk
// costs once the cache has expired. op's i-th operation uses
// paths[i%len(paths)]. The server runs in the benchmark's own process,
// as it runs in sluiced beside the daemon.
func benchFile(b *testing.B, op func(b *testing.B, paths []string)) {
	if os.Geteuid() != 0 {
		b.Skip("mounts FUSE: run as root")
	}
	base := b.TempDir()
	ws := filepath.Join(base, "ws")
	if err := os.MkdirAll(filepath.Join(ws, "src"), 0o755); err != nil {
		b.Fatal(err)
	}
	fourK := bytes.Repeat([]byte("0123456789abcde\n"), 256)
	if err := os.WriteFile(filepath.Join(ws, "src", "four_k.txt"), fourK, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, "many"), 0o755); err != nil {
		b.Fatal(err)
	}
	many := make([]string, manyFiles)
	for i := range many {
		many[i] = filepath.Join("many", fmt.Sprintf("f%04d", i))
		if err := os.WriteFile(filepath.Join(ws, many[i]), fourK, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	passthrough := map[string]bool{}
	mount := func(name string, timeout time.Duration) string {
		mnt := filepath.Join(base, name)
		if err := os.Mkdir(mnt, 0o755); err != nil {
			b.Fatal(err)
		}
		root, err := securefs.OpenRoot(ws, securefs.ModeAuto)
		if err != nil {
			b.Fatal(err)
		}
		v, err := Mount(mnt, []Source{{Root: root}}, Options{Hide: never, Timeout: timeout})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			v.Close()
			<-v.Done()
		})
		passthrough[name] = v.Passthrough
		return v.Path(0)
	}
	one := []string{filepath.Join("src", "four_k.txt")}
	runs := []struct {
		name, dir string
		rels      []string
	}{
		{"direct", ws, one},
		{"view", mount("view", time.Second), one},
		{"view-uncached", mount("view-uncached", time.Nanosecond), many},
	}
	for _, r := range runs {
		var paths []string
		for _, rel := range r.rels {
			paths = append(paths, filepath.Join(r.dir, rel))
		}
		b.Run(r.name, func(b *testing.B) {
			op(b, paths)
			if pt, ok := passthrough[r.name]; ok {
				// 1: reads go to the backing file, not through the server.
				v := 0.0
				if pt {
					v = 1
				}
				b.ReportMetric(v, "passthrough")
			}
		})
	}
}

// manyFiles is enough that a name is looked up again only after its
// jiffy of caching is long over.
const manyFiles = 4096

func BenchmarkStat(b *testing.B) {
	benchFile(b, func(b *testing.B, paths []string) {
		var st unix.Stat_t
		i := 0
		for b.Loop() {
			if err := unix.Stat(paths[i%len(paths)], &st); err != nil {
				b.Fatal(err)
			}
			i++
		}
		if st.Size != 4096 {
			b.Fatalf("size %d", st.Size)
		}
	})
}

func BenchmarkOpenRead(b *testing.B) {
	benchFile(b, func(b *testing.B, paths []string) {
		buf := make([]byte, 8192)
		b.SetBytes(4096)
		i := 0
		for b.Loop() {
			fd, err := unix.Open(paths[i%len(paths)], unix.O_RDONLY|unix.O_CLOEXEC, 0)
			i++
			if err != nil {
				b.Fatal(err)
			}
			n, err := unix.Read(fd, buf)
			unix.Close(fd)
			if err != nil || n != 4096 {
				b.Fatalf("read %d bytes: %v", n, err)
			}
		}
	})
}

// BenchmarkWalk lists every directory and lstats every entry of a tree of
// 10,000 files in 100 directories, as find and git status do: directly,
// through a view whose caches were warmed by one walk first (the kernel
// answers; each opendir still reaches the view), and through a view that
// cannot watch (the view before the watch: 1 s names and attributes, no
// listing cache).
func BenchmarkWalk(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("mounts FUSE: run as root")
	}
	base := b.TempDir()
	ws := filepath.Join(base, "ws")
	for d := range 100 {
		dir := filepath.Join(ws, fmt.Sprintf("d%02d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", f)), []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	mount := func(name string) *View {
		mnt := filepath.Join(base, name)
		if err := os.Mkdir(mnt, 0o755); err != nil {
			b.Fatal(err)
		}
		root, err := securefs.OpenRoot(ws, securefs.ModeAuto)
		if err != nil {
			b.Fatal(err)
		}
		v, err := Mount(mnt, []Source{{Root: root}}, Options{Hide: never, Timeout: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			v.Close()
			<-v.Done()
		})
		return v
	}
	v := mount("mnt")
	// The view as it was before it watched: names and attributes for
	// 1 s, listings never kept (what a directory gets that the watch
	// limit refused).
	unwatched := mount("unwatched")
	setAdd(unwatched.w, func(int, string, uint32) (int, error) { return -1, unix.ENOSPC })
	walkOnce := func(b *testing.B, dir string) int {
		n := 0
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			var st unix.Stat_t
			n++
			return unix.Lstat(p, &st)
		})
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	walk := func(b *testing.B, dir string) {
		walkOnce(b, dir) // warm
		n := 0
		for b.Loop() {
			n = walkOnce(b, dir)
		}
		if n != 10101 {
			b.Fatalf("walked %d entries", n)
		}
	}
	b.Run("direct", func(b *testing.B) { walk(b, ws) })
	for _, r := range []struct {
		name string
		v    *View
	}{{"view", v}, {"view-unwatched", unwatched}} {
		b.Run(r.name, func(b *testing.B) {
			s0 := r.v.Stats()
			walk(b, r.v.Path(0))
			s := r.v.Stats()
			b.ReportMetric(float64(s.Lookups-s0.Lookups)/float64(b.N), "lookups/op")
			b.ReportMetric(float64(s.Readdirs-s0.Readdirs)/float64(b.N), "reads/op")
		})
	}
}
