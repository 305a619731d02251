package fileop

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// noSyncDir makes the directory fsync a no-op until the test ends: a race
// test is about names, and fsync would make each move slow enough that
// few of them overlap a swap.
func noSyncDir(t *testing.T) {
	TestHookSyncDir = func(int) error { return nil }
	t.Cleanup(func() { TestHookSyncDir = nil })
}

// swapLoop exchanges two names in dir in a RENAME_EXCHANGE loop until
// stop closes, counting swaps; ENOENT (one name missing for a moment) is
// skipped. It returns a function that stops it and reports its error.
func swapLoop(t *testing.T, dir, a, b string, swaps *atomic.Int64) (stop func()) {
	t.Helper()
	dirfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var swapErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			switch err := unix.Renameat2(dirfd, a, dirfd, b, unix.RENAME_EXCHANGE); err {
			case nil:
				swaps.Add(1)
			case unix.ENOENT:
			default:
				swapErr = err
				return
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			unix.Close(dirfd)
			if swapErr != nil {
				t.Errorf("swap: %v", swapErr)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestMoveParentSwapRace: while moves run, the destination's parent "d"
// and a symlink "x" to an outside directory trade names in a loop. A
// move's destination resolves either to the real directory (and the file
// lands there) or to the link (refused as an escape): nothing ever
// appears outside.
func TestMoveParentSwapRace(t *testing.T) {
	for _, mode := range []securefs.Mode{securefs.ModeOpenat2, securefs.ModeFallback} {
		t.Run(mode.String(), func(t *testing.T) {
			f := newFixture(t, mode)
			noSyncDir(t)
			empty := filepath.Join(filepath.Dir(f.out), "empty-outside")
			for _, d := range []string{empty, filepath.Join(f.dir, "d")} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(empty, filepath.Join(f.dir, "x")); err != nil {
				t.Fatal(err)
			}
			var swaps atomic.Int64
			stop := swapLoop(t, f.dir, "d", "x", &swaps)
			var ok, escaped, overlapped int
			deadline := time.Now().Add(time.Second)
			for i := 0; time.Now().Before(deadline); i++ {
				name := "f" + strconv.Itoa(i)
				put(t, filepath.Join(f.dir, name), "payload\n")
				before := swaps.Load()
				src, err := ResolveParent(f.root, name)
				if err != nil {
					stop()
					t.Fatal(err)
				}
				dst, err := ResolveParent(f.root, "d/"+name)
				if errors.Is(err, securefs.ErrPathEscapes) {
					src.Close()
					escaped++
					if swaps.Load() != before {
						overlapped++
					}
					continue
				}
				if err != nil {
					stop()
					t.Fatalf("resolve: %v", err)
				}
				cur, _ := src.Stat()
				_, err = Move(src, dst, MoveOptions{Source: cur})
				src.Close()
				dst.Close()
				if err != nil {
					stop()
					t.Fatalf("move %s: %v", name, err)
				}
				ok++
				if swaps.Load() != before {
					overlapped++
				}
			}
			stop()
			if names := testutil.Listing(t, empty); len(names) != 0 {
				t.Fatalf("files appeared outside: %v", names)
			}
			f.outsideUntouched(t)
			t.Logf("%d swaps, %d moves overlapped a swap, %d landed inside, %d refused as escapes", swaps.Load(), overlapped, ok, escaped)
			if swaps.Load() == 0 || overlapped == 0 || ok == 0 || escaped == 0 {
				t.Fatalf("the race was not exercised both ways: %d swaps, %d overlapped, %d ok, %d escaped", swaps.Load(), overlapped, ok, escaped)
			}
		})
	}
}

// TestMoveSourceSwapRace: a racing thread exchanges the source name
// "src" with a symlink "lnk" to the outside secret while moves of "src"
// run, each decided on the file it saw. A move either moves that file
// (the destination is a regular file with its content, never the link)
// or is refused: not what the decision saw (ErrChanged, before the
// rename or moved back after it).
func TestMoveSourceSwapRace(t *testing.T) {
	f := newFixture(t, securefs.ModeOpenat2)
	noSyncDir(t)
	sub := filepath.Join(f.dir, "sub")
	put(t, filepath.Join(sub, "src"), "A\n")
	if err := os.Symlink(filepath.Join(f.out, "secret"), filepath.Join(sub, "lnk")); err != nil {
		t.Fatal(err)
	}
	var swaps atomic.Int64
	stop := swapLoop(t, sub, "src", "lnk", &swaps)
	var moved, changed, skipped, overlapped int
	deadline := time.Now().Add(time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		// After a move "src" is gone (the swaps stop): put a file back.
		if _, err := os.Lstat(filepath.Join(sub, "src")); os.IsNotExist(err) {
			put(t, filepath.Join(sub, "src"), "A\n")
		}
		dstName := "dst" + strconv.Itoa(i)
		src, err := ResolveParent(f.root, "sub/src")
		if err != nil {
			stop()
			t.Fatal(err)
		}
		dst, err := ResolveParent(f.root, "sub/"+dstName)
		if err != nil {
			stop()
			t.Fatal(err)
		}
		cur, err := src.Stat()
		if err != nil || cur.Kind != securefs.KindFile {
			src.Close()
			dst.Close()
			skipped++ // the decision saw the link: not this test's case
			continue
		}
		before := swaps.Load()
		_, err = Move(src, dst, MoveOptions{Source: cur})
		src.Close()
		dst.Close()
		if swaps.Load() != before {
			overlapped++
		}
		fi, lerr := os.Lstat(filepath.Join(sub, dstName))
		switch {
		case err == nil:
			moved++
			if lerr != nil || !fi.Mode().IsRegular() || get(t, filepath.Join(sub, dstName)) != "A\n" {
				stop()
				t.Fatalf("move %d succeeded but the destination is %v, %v", i, fi, lerr)
			}
		case errors.Is(err, ErrChanged):
			changed++
			if !os.IsNotExist(lerr) {
				stop()
				t.Fatalf("move %d refused (%v) but left %v at the destination", i, err, fi)
			}
		default:
			stop()
			t.Fatalf("move %d: %v", i, err)
		}
	}
	stop()
	f.outsideUntouched(t)
	t.Logf("%d swaps, %d moves overlapped a swap, %d moved, %d refused as changed, %d decisions saw the link", swaps.Load(), overlapped, moved, changed, skipped)
	if swaps.Load() == 0 || overlapped == 0 || moved == 0 || changed == 0 {
		t.Fatalf("the race was not exercised: %d swaps, %d overlapped, %d moved, %d changed", swaps.Load(), overlapped, moved, changed)
	}
}
