package fileop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// moveTree is the tree every move case starts from, beneath the root:
// sub/ exists (newFixture), plus these.
func moveTree(t *testing.T, f *fixture) {
	t.Helper()
	put(t, filepath.Join(f.dir, "a.txt"), "A\n")
	put(t, filepath.Join(f.dir, "b.txt"), "B\n")
	for _, d := range []string{"d", "d/inner", "e"} {
		if err := os.Mkdir(filepath.Join(f.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	put(t, filepath.Join(f.dir, "d", "inner", "x"), "X\n")
	if err := os.Symlink(filepath.Join(f.out, "secret"), filepath.Join(f.dir, "ln")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(f.dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// snapshot lists every path beneath dir with its kind and, for files,
// content: what a refused move must leave exactly as it was.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		s := rel + " " + fi.Mode().Type().String()
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			s += " " + string(b)
		}
		out = append(out, s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return strings.Join(out, "|")
}

func TestMove(t *testing.T) {
	type c struct {
		name     string
		src, dst string
		ifMatch  string
		source   func(Current) Current // what the decision saw; nil: the source's Stat
		want     error
		wantKind api.Kind
		wantSum  string
		check    func(t *testing.T, f *fixture)
	}
	cases := []c{
		{name: "file same dir", src: "a.txt", dst: "c.txt", wantKind: securefs.KindFile, wantSum: digest("A\n"),
			check: func(t *testing.T, f *fixture) {
				if get(t, filepath.Join(f.dir, "c.txt")) != "A\n" {
					t.Error("c.txt lacks a's content")
				}
			}},
		{name: "file into subdir", src: "a.txt", dst: "sub/a.txt", wantKind: securefs.KindFile, wantSum: digest("A\n")},
		{name: "file out of subdir", src: "d/inner/x", dst: "x", wantKind: securefs.KindFile, wantSum: digest("X\n")},
		{name: "directory", src: "d", dst: "e/d2", wantKind: securefs.KindDir,
			check: func(t *testing.T, f *fixture) {
				if get(t, filepath.Join(f.dir, "e", "d2", "inner", "x")) != "X\n" {
					t.Error("the directory's content did not move with it")
				}
			}},
		{name: "symlink moves as itself", src: "ln", dst: "ln2", wantKind: securefs.KindSymlink,
			check: func(t *testing.T, f *fixture) {
				if target, err := os.Readlink(filepath.Join(f.dir, "ln2")); err != nil || target != filepath.Join(f.out, "secret") {
					t.Errorf("ln2 = %q, %v", target, err)
				}
			}},
		{name: "if_match holds", src: "a.txt", dst: "c.txt", ifMatch: digest("A\n"), wantKind: securefs.KindFile, wantSum: digest("A\n")},
		{name: "stale if_match", src: "a.txt", dst: "c.txt", ifMatch: digest("old\n"), want: ErrPrecondition},
		{name: "if_match on a directory", src: "d", dst: "d2", ifMatch: digest("A\n"), want: ErrPrecondition},
		{name: "if_match absent never holds", src: "a.txt", dst: "c.txt", ifMatch: "absent", want: ErrPrecondition},
		{name: "malformed if_match", src: "a.txt", dst: "c.txt", ifMatch: "sha256:zz", want: ErrInvalidIfMatch},
		{name: "destination file exists", src: "a.txt", dst: "b.txt", want: ErrExists},
		{name: "destination dir exists", src: "a.txt", dst: "e", want: ErrExists},
		{name: "destination symlink exists", src: "a.txt", dst: "ln", want: ErrExists},
		{name: "dir onto empty dir", src: "d", dst: "e", want: ErrExists},
		{name: "source missing", src: "nope", dst: "c.txt", want: ErrNoSource},
		{name: "fifo", src: "fifo", dst: "f2", want: ErrNotRegular},
		{name: "directory into itself", src: "d", dst: "d/inner/d", want: ErrIntoItself},
		{name: "directory onto itself below", src: "d", dst: "d/d", want: ErrIntoItself},
		{name: "temp name as destination", src: "a.txt", dst: TempPrefix + "x", want: ErrBadName},
		{name: "not what the decision saw", src: "a.txt", dst: "c.txt", want: ErrChanged,
			source: func(c Current) Current { c.Ino++; return c }},
		{name: "kind not what the decision saw", src: "a.txt", dst: "c.txt", want: ErrChanged,
			source: func(c Current) Current { c.Kind = securefs.KindDir; return c }},
		{name: "no decision", src: "a.txt", dst: "c.txt", want: ErrNoSource,
			source: func(Current) Current { return Current{} }},
	}
	for _, mode := range []securefs.Mode{securefs.ModeOpenat2, securefs.ModeFallback} {
		t.Run(mode.String(), func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					f := newFixture(t, mode)
					moveTree(t, f)
					before := snapshot(t, f.dir)
					src, dst := f.parent(t, tc.src), f.parent(t, tc.dst)
					var locks Locks
					unlock := locks.LockPair(src, dst)
					cur, err := src.Stat()
					if err != nil {
						t.Fatal(err)
					}
					if tc.source != nil {
						cur = tc.source(cur)
					}
					res, err := Move(src, dst, MoveOptions{Source: cur, IfMatch: tc.ifMatch})
					unlock()
					if locks.held() != 0 {
						t.Fatalf("%d lock entries left", locks.held())
					}
					f.outsideUntouched(t)
					if tc.want != nil {
						if !errors.Is(err, tc.want) {
							t.Fatalf("Move = %+v, %v; want %v", res, err, tc.want)
						}
						if after := snapshot(t, f.dir); after != before {
							t.Fatalf("a refused move changed the tree:\n%s\n%s", before, after)
						}
						return
					}
					if err != nil || res.Kind != tc.wantKind || res.SHA256 != tc.wantSum {
						t.Fatalf("Move = %+v, %v; want kind %s sum %q", res, err, tc.wantKind, tc.wantSum)
					}
					if _, err := os.Lstat(filepath.Join(f.dir, tc.src)); !os.IsNotExist(err) {
						t.Errorf("source still there: %v", err)
					}
					fi, err := os.Lstat(filepath.Join(f.dir, tc.dst))
					if err != nil || kindOf(uint32(fileModeBits(fi))) != tc.wantKind {
						t.Errorf("destination: %v, %v", fi, err)
					}
					if tc.check != nil {
						tc.check(t, f)
					}
				})
			}
		})
	}
}

// fileModeBits is st_mode of fi.
func fileModeBits(fi os.FileInfo) uint32 { return fi.Sys().(*syscall.Stat_t).Mode }

// beforeRename runs fn between Move's checks and its rename until the
// test ends: a racing process's change at the worst moment.
func beforeRename(t *testing.T, fn func()) {
	testHookBeforeRename = fn
	t.Cleanup(func() { testHookBeforeRename = nil })
}

// TestMoveNoReplaceIsTheCheck: a name created at the destination after
// Move looked (by another process) is never replaced: RENAME_NOREPLACE is
// the check, the early look only a courtesy. With flags 0 in the rename
// this test fails: "theirs" is destroyed.
func TestMoveNoReplaceIsTheCheck(t *testing.T) {
	f := newFixture(t, securefs.ModeOpenat2)
	put(t, filepath.Join(f.dir, "a"), "A\n")
	src, dst := f.parent(t, "a"), f.parent(t, "b")
	cur, _ := src.Stat()
	beforeRename(t, func() { put(t, filepath.Join(f.dir, "b"), "theirs\n") })
	if _, err := Move(src, dst, MoveOptions{Source: cur}); !errors.Is(err, ErrExists) || !errors.Is(err, unix.EEXIST) {
		t.Fatalf("Move onto a name created in the race: %v, want ErrExists from EEXIST", err)
	}
	if get(t, filepath.Join(f.dir, "b")) != "theirs\n" || get(t, filepath.Join(f.dir, "a")) != "A\n" {
		t.Fatal("a name was replaced")
	}
}

// TestMoveSourceSwapped: another process swaps the source for a symlink
// (to an outside secret) or for another directory between Move's check
// and its rename. What was moved is not what the decision saw: it is
// moved back and the move is ErrChanged. Without the check after the
// rename the swapped-in entry stays under the new name.
func TestMoveSourceSwapped(t *testing.T) {
	for _, swapIn := range []string{"symlink", "dir"} {
		t.Run(swapIn, func(t *testing.T) {
			f := newFixture(t, securefs.ModeOpenat2)
			put(t, filepath.Join(f.dir, "a"), "A\n")
			other := filepath.Join(f.dir, "other")
			if swapIn == "symlink" {
				if err := os.Symlink(filepath.Join(f.out, "secret"), other); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := os.Mkdir(other, 0o755); err != nil {
					t.Fatal(err)
				}
				put(t, filepath.Join(other, ".env"), "never walked\n")
			}
			src, dst := f.parent(t, "a"), f.parent(t, "sub/b")
			cur, _ := src.Stat()
			swapped := false
			beforeRename(t, func() {
				if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(f.dir, "a"), unix.AT_FDCWD, other, unix.RENAME_EXCHANGE); err != nil {
					t.Errorf("swap: %v", err)
				}
				swapped = true
			})
			_, err := Move(src, dst, MoveOptions{Source: cur})
			if !swapped || !errors.Is(err, ErrChanged) {
				t.Fatalf("Move after a swap: %v (swapped %v), want ErrChanged", err, swapped)
			}
			if _, err := os.Lstat(filepath.Join(f.dir, "sub", "b")); !os.IsNotExist(err) {
				t.Fatalf("the swapped-in %s stayed under the new name: %v", swapIn, err)
			}
			fi, err := os.Lstat(filepath.Join(f.dir, "a"))
			if err != nil || (swapIn == "symlink") != (fi.Mode()&os.ModeSymlink != 0) {
				t.Fatalf("the swapped-in %s was not moved back: %v %v", swapIn, fi, err)
			}
			f.outsideUntouched(t)
		})
	}
}

// TestMoveCrossDevice: a move to another file system is ErrCrossDevice
// and copies nothing.
func TestMoveCrossDevice(t *testing.T) {
	f := newFixture(t, securefs.ModeOpenat2)
	testutil.MountTmpfs(t, filepath.Join(f.dir, "mnt"), "1M")
	put(t, filepath.Join(f.dir, "a"), "A\n")
	src, dst := f.parent(t, "a"), f.parent(t, "mnt/a")
	cur, _ := src.Stat()
	if _, err := Move(src, dst, MoveOptions{Source: cur}); !errors.Is(err, ErrCrossDevice) || !errors.Is(err, unix.EXDEV) {
		t.Fatalf("Move across file systems: %v", err)
	}
	if names := testutil.Listing(t, filepath.Join(f.dir, "mnt")); len(names) != 0 {
		t.Fatalf("something landed on the other file system: %v", names)
	}
}

// TestMoveNotDurable: an fsync failure after the rename is ErrNotDurable
// with the result; the move happened.
func TestMoveNotDurable(t *testing.T) {
	f := newFixture(t, securefs.ModeOpenat2)
	put(t, filepath.Join(f.dir, "a"), "A\n")
	src, dst := f.parent(t, "a"), f.parent(t, "sub/a")
	cur, _ := src.Stat()
	var synced int
	TestHookSyncDir = func(int) error { synced++; return unix.EIO }
	t.Cleanup(func() { TestHookSyncDir = nil })
	res, err := Move(src, dst, MoveOptions{Source: cur})
	if !errors.Is(err, ErrNotDurable) || !errors.Is(err, unix.EIO) || res.SHA256 != digest("A\n") {
		t.Fatalf("Move = %+v, %v", res, err)
	}
	if synced != 2 {
		t.Fatalf("%d directories fsynced, want both", synced)
	}
	if get(t, filepath.Join(f.dir, "sub", "a")) != "A\n" {
		t.Fatal("the move did not happen")
	}
}

// TestLockPair: two moves that take the same two names in opposite roles
// do not deadlock; one name reached by two paths is one lock.
func TestLockPair(t *testing.T) {
	f := newFixture(t, securefs.ModeOpenat2)
	var locks Locks
	a, b := f.parent(t, "a"), f.parent(t, "sub/b")
	done := make(chan struct{})
	const n = 200
	for range 2 {
		go func() {
			for i := range n {
				var u func()
				if i%2 == 0 {
					u = locks.LockPair(a, b)
				} else {
					u = locks.LockPair(b, a)
				}
				u()
			}
			done <- struct{}{}
		}()
	}
	<-done
	<-done
	// Same name by two paths: locked once, not self-deadlocked.
	u := locks.LockPair(a, f.parent(t, "sub/../a"))
	if locks.refs(a) != 1 {
		t.Fatalf("refs %d, want 1", locks.refs(a))
	}
	u()
	// A writer of b waits while a pair holds it.
	u2 := locks.LockPair(a, b)
	got := make(chan struct{})
	go func() { unlock := locks.Lock(b); close(got); unlock() }()
	if err := testutil.Poll(5*time.Second, func() error {
		if locks.refs(b) != 2 {
			return fmt.Errorf("refs %d", locks.refs(b))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		t.Fatal("b was locked while a pair held it")
	default:
	}
	u2()
	u2()
	<-got
	if locks.held() != 0 {
		t.Fatalf("%d lock entries left", locks.held())
	}
}

func TestWalkNames(t *testing.T) {
	for _, mode := range []securefs.Mode{securefs.ModeOpenat2, securefs.ModeFallback} {
		t.Run(mode.String(), func(t *testing.T) {
			f := newFixture(t, mode)
			moveTree(t, f)
			if err := os.Symlink(f.out, filepath.Join(f.dir, "d", "inner", "out")); err != nil {
				t.Fatal(err)
			}
			put(t, filepath.Join(f.dir, "d", ".env"), "SECRET=1\n")
			p := f.parent(t, "d")
			cur, _ := p.Stat()
			var got []string
			err := p.WalkNames(context.Background(), cur, 100, func(rel string, k api.Kind) error {
				got = append(got, rel+":"+string(k))
				return nil
			})
			sort.Strings(got)
			want := []string{".env:file", "inner:dir", "inner/out:symlink", "inner/x:file"}
			sort.Strings(want)
			if err != nil || strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("WalkNames = %v, %v; want %v (the symlink listed, never descended)", got, err, want)
			}
			// Bound: 4 entries do not fit in 3.
			if err := p.WalkNames(context.Background(), cur, 3, func(string, api.Kind) error { return nil }); !errors.Is(err, ErrTooManyEntries) {
				t.Fatalf("bound: %v", err)
			}
			// fn's error stops the walk.
			stop := errors.New("stop")
			if err := p.WalkNames(context.Background(), cur, 100, func(string, api.Kind) error { return stop }); err != stop {
				t.Fatalf("fn error: %v", err)
			}
			// Another directory in its place is refused.
			other := cur
			other.Ino++
			if err := p.WalkNames(context.Background(), other, 100, func(string, api.Kind) error { return nil }); !errors.Is(err, ErrChanged) {
				t.Fatalf("identity: %v", err)
			}
			// A file has nothing beneath it.
			fp := f.parent(t, "a.txt")
			fcur, _ := fp.Stat()
			if err := fp.WalkNames(context.Background(), fcur, 0, func(string, api.Kind) error { return errors.New("called") }); err != nil {
				t.Fatalf("file: %v", err)
			}
			// Depth bound.
			deep := filepath.Join(f.dir, "deep")
			if err := os.MkdirAll(deep+strings.Repeat("/z", MaxWalkDepth+1), 0o755); err != nil {
				t.Fatal(err)
			}
			dp := f.parent(t, "deep")
			dcur, _ := dp.Stat()
			if err := dp.WalkNames(context.Background(), dcur, 1<<20, func(string, api.Kind) error { return nil }); !errors.Is(err, ErrTooManyEntries) {
				t.Fatalf("depth: %v", err)
			}
			// A directory swapped for a symlink to the outside between its
			// listing and its open (here by fn, which runs in between) is
			// not descended: ErrChanged, and no outside name is reported.
			var seen []string
			err = p.WalkNames(context.Background(), cur, 100, func(rel string, k api.Kind) error {
				seen = append(seen, rel)
				if rel == "inner" {
					in := filepath.Join(f.dir, "d", "inner")
					if err := os.Rename(in, in+".moved"); err != nil {
						return err
					}
					return os.Symlink(f.out, in)
				}
				return nil
			})
			if !errors.Is(err, ErrChanged) || strings.Contains(strings.Join(seen, " "), "secret") {
				t.Fatalf("walk into a swapped-in symlink: %v, saw %v", err, seen)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := p.WalkNames(ctx, cur, 100, func(string, api.Kind) error { return nil }); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled: %v", err)
			}
		})
	}
}
