package fileop

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// mkdirTree: a file, a symlink to the outside directory, and an empty
// directory beneath the root (plus sub/).
func mkdirTree(t *testing.T, f *fixture) {
	t.Helper()
	put(t, filepath.Join(f.dir, "a.txt"), "A\n")
	if err := os.Symlink(f.out, filepath.Join(f.dir, "ln")); err != nil {
		t.Fatal(err)
	}
}

func statT(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

// TestMkdir: one directory in a held parent; umask-independent mode and
// the given owner; anything already there is an ExistsError naming it.
func TestMkdir(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	for _, mode := range []securefs.Mode{securefs.ModeOpenat2, securefs.ModeFallback} {
		t.Run(mode.String(), func(t *testing.T) {
			f := newFixture(t, mode)
			mkdirTree(t, f)
			res, err := Mkdir(f.parent(t, "sub/new"), MkdirOptions{Perm: 0o751, UID: 1234, GID: 5678})
			if err != nil || len(res.Created) != 1 || res.Created[0] != "new" {
				t.Fatalf("Mkdir = %+v, %v", res, err)
			}
			st := statT(t, filepath.Join(f.dir, "sub", "new"))
			if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o7777 != 0o751 || st.Uid != 1234 || st.Gid != 5678 {
				t.Fatalf("made mode %o uid %d gid %d, want dir 0751 1234:5678 (umask 077 must not matter)", st.Mode, st.Uid, st.Gid)
			}
			if _, err := Mkdir(f.parent(t, "def"), MkdirOptions{UID: -1, GID: -1}); err != nil {
				t.Fatal(err)
			}
			if st := statT(t, filepath.Join(f.dir, "def")); st.Mode&0o7777 != 0o755 {
				t.Fatalf("default mode %o, want 0755", st.Mode&0o7777)
			}
			for _, c := range []struct {
				name string
				kind string
				want error
			}{
				{"sub", "dir", ErrExists},
				{"a.txt", "file", ErrExists},
				{"ln", "symlink", ErrExists},
				{TempPrefix + "x", "", ErrBadName},
			} {
				_, err := Mkdir(f.parent(t, c.name), MkdirOptions{UID: -1, GID: -1})
				var ee *ExistsError
				if !errors.Is(err, c.want) || (c.kind != "" && (!errors.As(err, &ee) || string(ee.Kind) != c.kind)) {
					t.Errorf("Mkdir(%s) = %v, want %v (a %s)", c.name, err, c.want, c.kind)
				}
			}
			f.outsideUntouched(t)
		})
	}
}

// TestMkdirAll: each missing component made beneath the root's fd; no
// symlink followed, one already there included; plain names only.
func TestMkdirAll(t *testing.T) {
	for _, mode := range []securefs.Mode{securefs.ModeOpenat2, securefs.ModeFallback} {
		t.Run(mode.String(), func(t *testing.T) {
			for _, c := range []struct {
				path    string
				created []string
				want    error
			}{
				{"x/y/z", []string{"x", "x/y", "x/y/z"}, nil},
				{"sub/n", []string{"sub/n"}, nil},
				{"sub", nil, nil},
				{"./sub//m/.", []string{"sub/m"}, nil},
				{".", nil, nil},
				{"a.txt/b", nil, ErrExists},
				{"a.txt", nil, ErrExists},
				{"ln/b", nil, securefs.ErrPathEscapes},
				{"ln", nil, securefs.ErrPathEscapes},
				{"sub/../x", nil, ErrBadName},
				{"../x", nil, ErrBadName},
				{"/x", nil, securefs.ErrPathEscapes},
				{"x/" + TempPrefix + "1", nil, ErrBadName},
			} {
				t.Run(c.path, func(t *testing.T) {
					f := newFixture(t, mode)
					mkdirTree(t, f)
					res, err := MkdirAll(f.root, c.path, MkdirOptions{Perm: 0o700, UID: -1, GID: -1})
					if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
						t.Fatalf("MkdirAll = %+v, %v; want %v", res, err, c.want)
					}
					if len(res.Created) != len(c.created) {
						t.Fatalf("created %v, want %v", res.Created, c.created)
					}
					for i, rel := range c.created {
						if res.Created[i] != rel {
							t.Fatalf("created %v, want %v", res.Created, c.created)
						}
						if st := statT(t, filepath.Join(f.dir, rel)); st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o777 != 0o700 {
							t.Fatalf("%s: mode %o", rel, st.Mode)
						}
					}
					f.outsideUntouched(t)
				})
			}
		})
	}
}

// TestMkdirAllSwapAfterMkdir: another process replaces a directory just
// made with a symlink to the outside before the next step opens it. The
// next component is not made through the link: ErrChanged, and nothing
// appears outside. Without the no-follow open after mkdirat, "c" lands
// in the outside directory.
func TestMkdirAllSwapAfterMkdir(t *testing.T) {
	for _, mode := range []securefs.Mode{securefs.ModeOpenat2, securefs.ModeFallback} {
		t.Run(mode.String(), func(t *testing.T) {
			f := newFixture(t, mode)
			testHookAfterMkdirat = func(dirfd int, name string) {
				if name != "b" {
					return
				}
				if err := unix.Renameat(dirfd, name, dirfd, "b.moved"); err != nil {
					t.Errorf("move away: %v", err)
				}
				if err := unix.Symlinkat(f.out, dirfd, name); err != nil {
					t.Errorf("plant: %v", err)
				}
			}
			t.Cleanup(func() { testHookAfterMkdirat = nil })
			res, err := MkdirAll(f.root, "a/b/c", MkdirOptions{UID: -1, GID: -1})
			if !errors.Is(err, ErrChanged) {
				t.Fatalf("MkdirAll = %+v, %v; want ErrChanged", res, err)
			}
			if len(res.Created) != 1 || res.Created[0] != "a" {
				t.Fatalf("created %v, want [a]", res.Created)
			}
			f.outsideUntouched(t)
			if _, err := ResolveParent(f.root, "a/b/c"); !errors.Is(err, securefs.ErrPathEscapes) {
				t.Fatalf("and a later Mkdir's parent through the link: %v", err)
			}
		})
	}
}

// TestMkdirAllSwapRace: while MkdirAll runs, a racing thread exchanges
// the directory "d" with a symlink "x" to an outside directory. Each call
// either makes its directories in the real "d" or is refused as an
// escape: nothing ever appears outside.
func TestMkdirAllSwapRace(t *testing.T) {
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
				before := swaps.Load()
				_, err := MkdirAll(f.root, "d/n"+strconv.Itoa(i)+"/m", MkdirOptions{UID: -1, GID: -1})
				switch {
				case err == nil:
					ok++
				case errors.Is(err, securefs.ErrPathEscapes):
					escaped++
				default:
					stop()
					t.Fatalf("MkdirAll %d: %v", i, err)
				}
				if swaps.Load() != before {
					overlapped++
				}
			}
			stop()
			if names := testutil.Listing(t, empty); len(names) != 0 {
				t.Fatalf("directories appeared outside: %v", names)
			}
			f.outsideUntouched(t)
			t.Logf("%d swaps, %d calls overlapped a swap, %d made inside, %d refused as escapes", swaps.Load(), overlapped, ok, escaped)
			if swaps.Load() == 0 || overlapped == 0 || ok == 0 || escaped == 0 {
				t.Fatalf("the race was not exercised both ways: %d swaps, %d overlapped, %d ok, %d escaped", swaps.Load(), overlapped, ok, escaped)
			}
		})
	}
}

// TestMkdirNotDurable: an fsync failure is ErrNotDurable with the result;
// the directory was made.
func TestMkdirNotDurable(t *testing.T) {
	f := newFixture(t, securefs.ModeOpenat2)
	failSyncDir(t)
	res, err := Mkdir(f.parent(t, "n"), MkdirOptions{UID: -1, GID: -1})
	if !errors.Is(err, ErrNotDurable) || !errors.Is(err, unix.EIO) || len(res.Created) != 1 {
		t.Fatalf("Mkdir = %+v, %v", res, err)
	}
	res, err = MkdirAll(f.root, "p/q", MkdirOptions{UID: -1, GID: -1})
	if !errors.Is(err, ErrNotDurable) || len(res.Created) != 2 {
		t.Fatalf("MkdirAll = %+v, %v", res, err)
	}
	for _, d := range []string{"n", "p/q"} {
		if fi, err := os.Stat(filepath.Join(f.dir, d)); err != nil || !fi.IsDir() {
			t.Fatalf("%s not made: %v", d, err)
		}
	}
}
