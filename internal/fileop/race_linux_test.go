package fileop

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestParentSwapRace: while writes run, the parent directory "d" and a
// symlink "x" to an outside directory trade names in a RENAME_EXCHANGE
// loop. A write resolves "d" either to the real directory (and then lands
// in it, under whatever name it has by the commit) or to the link (and is
// refused as an escape): nothing ever appears outside.
func TestParentSwapRace(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t, v.mode)
			empty := filepath.Join(filepath.Dir(f.out), "empty-outside")
			if err := os.Mkdir(empty, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(f.dir, "d"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(empty, filepath.Join(f.dir, "x")); err != nil {
				t.Fatal(err)
			}
			dirfd, err := unix.Open(f.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(dirfd)

			sw := testutil.Swap(t, func(int) error {
				return unix.Renameat2(dirfd, "d", dirfd, "x", unix.RENAME_EXCHANGE)
			})

			var ok, escaped, overlapped int
			var written []string
			deadline := time.Now().Add(time.Second)
			for i := 0; time.Now().Before(deadline); i++ {
				name := "f" + strconv.Itoa(i)
				before := sw.Swaps()
				p, err := ResolveParent(f.root, "d/"+name)
				if errors.Is(err, securefs.ErrPathEscapes) {
					escaped++
					if sw.Swaps() != before {
						overlapped++
					}
					continue
				}
				if err != nil {
					sw.Stop()
					t.Fatalf("resolve: %v", err)
				}
				_, err = Write(p, []byte("payload\n"), WriteOptions{Mode: CreateOrOverwrite, noTmpfile: v.noTmpfile})
				p.Close()
				if err != nil {
					sw.Stop()
					t.Fatalf("write %s: %v", name, err)
				}
				ok++
				if sw.Swaps() != before {
					overlapped++
				}
				written = append(written, name)
				if i%64 == 0 {
					if names := testutil.Listing(t, empty); len(names) != 0 {
						sw.Stop()
						t.Fatalf("files appeared outside: %v", names)
					}
				}
			}
			if err := sw.Stop(); err != nil {
				t.Fatalf("swap: %v", err)
			}
			if names := testutil.Listing(t, empty); len(names) != 0 {
				t.Fatalf("files appeared outside: %v", names)
			}
			f.outsideUntouched(t)
			// Every write that succeeded is in the real directory.
			real := filepath.Join(f.dir, "d")
			if fi, err := os.Lstat(real); err != nil || !fi.IsDir() {
				real = filepath.Join(f.dir, "x")
			}
			have := map[string]bool{}
			for _, n := range testutil.Listing(t, real) {
				have[n] = true
			}
			for _, n := range written {
				if !have[n] {
					t.Fatalf("%s was written but is not in the real directory", n)
				}
			}
			if len(have) != len(written) {
				t.Fatalf("real directory has %d names, %d written", len(have), len(written))
			}
			t.Logf("%d swaps, %d writes overlapped a swap, %d landed inside, %d refused as escapes", sw.Swaps(), overlapped, ok, escaped)
			if sw.Swaps() == 0 || overlapped == 0 {
				t.Fatalf("the race was not exercised: %d swaps, %d during a write", sw.Swaps(), overlapped)
			}
			if ok == 0 || escaped == 0 {
				t.Fatalf("the race never went both ways: %d ok, %d escaped", ok, escaped)
			}
		})
	}
}

// TestConcurrentIfMatch: 16 writers with the same if_match, each holding
// the name's lock across its write: exactly one wins.
func TestConcurrentIfMatch(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t, v.mode)
			target := filepath.Join(f.dir, "sub", "f")
			put(t, target, "base\n")
			var locks Locks
			const n = 16
			start := make(chan struct{})
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					// Reach the same directory two ways: the lock is the
					// inode's, not the path's.
					path := "sub/f"
					if i%2 == 1 {
						path = "./sub/../sub/f"
					}
					p, err := ResolveParent(f.root, path)
					if err != nil {
						errs[i] = err
						return
					}
					defer p.Close()
					unlock := locks.Lock(p)
					defer unlock()
					_, errs[i] = Write(p, fmt.Appendf(nil, "writer %d\n", i), WriteOptions{
						Mode:      Overwrite,
						noTmpfile: v.noTmpfile,
						Check:     func(c Current) error { return MatchIfMatch(digest("base\n"), c) },
					})
				}()
			}
			close(start)
			wg.Wait()
			winner := -1
			for i, err := range errs {
				switch {
				case err == nil && winner >= 0:
					t.Fatalf("writers %d and %d both won", winner, i)
				case err == nil:
					winner = i
				case !errors.Is(err, ErrPrecondition):
					t.Fatalf("writer %d: %v, want ErrPrecondition", i, err)
				}
			}
			if winner < 0 {
				t.Fatal("no writer won")
			}
			if got, want := get(t, target), fmt.Sprintf("writer %d\n", winner); got != want {
				t.Fatalf("content = %q, want %q", got, want)
			}
			noTemps(t, filepath.Join(f.dir, "sub"))
			if locks.held() != 0 {
				t.Fatalf("%d lock entries left", locks.held())
			}
		})
	}
}

// held reports how many names have holders or waiters.
func (l *Locks) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

// refs reports the holders and waiters of p's name.
func (l *Locks) refs(p *Parent) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.m[lockKey{p.dir.Stat.Dev, p.dir.Stat.Ino, p.Name}]; e != nil {
		return e.refs
	}
	return 0
}

// TestLocksKeyedByName: one name reached by two paths is one lock; another
// name is another.
func TestLocksKeyedByName(t *testing.T) {
	f := newFixture(t, securefs.ModeOpenat2)
	var locks Locks
	a1, a2, b := f.parent(t, "a"), f.parent(t, "sub/../a"), f.parent(t, "b")
	unlockA := locks.Lock(a1)
	unlockB := locks.Lock(b) // another name: does not wait
	got := make(chan struct{})
	go func() {
		unlock := locks.Lock(a2)
		close(got)
		unlock()
	}()
	// The second locker queues on the first one's entry...
	if err := testutil.Poll(5*time.Second, func() error {
		if n := locks.refs(a1); n != 2 {
			return fmt.Errorf("refs %d", n)
		}
		return nil
	}); err != nil {
		t.Fatalf("the second path to the same name never queued on its lock: %v", err)
	}
	// ...and is not granted it while it is held.
	select {
	case <-got:
		t.Fatal("the same name was locked twice")
	default:
	}
	unlockA()
	unlockA() // idempotent
	<-got
	unlockB()
	if locks.held() != 0 {
		t.Fatalf("%d lock entries left", locks.held())
	}
}
