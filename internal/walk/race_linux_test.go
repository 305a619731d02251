//go:build linux

package walk

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestSwapRace: while walks run, a racing thread swaps a directory with a
// symlink to a directory outside the root, and a file with a symlink to a
// file outside, over and over (renameat2 RENAME_EXCHANGE: both names
// always exist, so each walk lists one or the other). Every fd the walk
// opens is checked by readlink to lie beneath the root, and no output
// may hold the outside text. The race is shown to have overlapped: some
// walks found the entry changed between listing it and opening it
// (Stats.Changed: the lookup that openat2 refused), some entered the real
// directory; a run that never saw both fails as proving nothing.
func TestSwapRace(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	out := filepath.Join(base, "outside")
	testutil.Must(t, os.MkdirAll(filepath.Join(out, "sub"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(out, "secret.txt"), []byte("OUTSIDE SECRET\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(out, "sub", "deeper.txt"), []byte("OUTSIDE SECRET\n"), 0o644))
	testutil.Must(t, os.MkdirAll(filepath.Join(root, "d", "e"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(root, "d", "f.txt"), []byte("inside NEEDLE\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(root, "d", "e", "g.txt"), []byte("inside NEEDLE\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(root, "f.txt"), []byte("inside NEEDLE\n"), 0o644))
	// Entries sorted before d and f.txt widen the window between the
	// directory listing and the open of d.
	for i := range 150 {
		testutil.Must(t, os.WriteFile(filepath.Join(root, fmt.Sprintf("a%03d.txt", i)), []byte(strings.Repeat("filler line\n", 40)), 0o644))
	}
	testutil.Must(t, os.Symlink("../outside", filepath.Join(root, "x-dir")))
	testutil.Must(t, os.Symlink("../outside/secret.txt", filepath.Join(root, "x-file")))
	watchOpens(t, root)

	var stop atomic.Bool
	var swaps atomic.Int64
	var swapErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			for _, p := range [][2]string{{"d", "x-dir"}, {"f.txt", "x-file"}} {
				if swapErr = unix.Renameat2(unix.AT_FDCWD, filepath.Join(root, p[0]), unix.AT_FDCWD, filepath.Join(root, p[1]), unix.RENAME_EXCHANGE); swapErr != nil {
					return
				}
			}
			swaps.Add(1)
		}
	}()

	const maxWalks = 20000
	var walks, changed, entered int
	for walks = 0; walks < maxWalks && (changed == 0 || entered == 0 || walks < 60); walks++ {
		m := modes[walks%2]
		var r *Result
		var err error
		if walks%3 == 2 {
			r, err = Tree(context.Background(), openDir(t, root, "."), 8, true, opts(m, Options{Skip: SkipNone}))
		} else {
			r, err = Search(context.Background(), openDir(t, root, "."), Query{Content: mustRE("SECRET|NEEDLE")}, opts(m, Options{Skip: SkipNone, MaxBytes: 1 << 20}))
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(r.Out), "SECRET") || strings.Contains(string(r.Out), "deeper") {
			t.Fatalf("ESCAPE (%s): the walk returned what lies outside:\n%s", m.name, r.Out)
		}
		if r.Stats.Changed > 0 {
			changed++
		}
		if strings.Contains(string(r.Out), "/e/g.txt") {
			entered++
		}
	}
	stop.Store(true)
	wg.Wait()
	if swapErr != nil {
		t.Fatalf("swap: %v", swapErr)
	}
	t.Logf("%d walks, %d swaps: %d walks found an entry changed between listing and open, %d entered the real directory; none read outside",
		walks, swaps.Load(), changed, entered)
	if changed == 0 || entered == 0 {
		t.Fatal("the race never overlapped a walk: the test proved nothing")
	}
}
