package fileop

import (
	"github.com/sluicehq/sluice/api"

	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashHelperEnv); dir != "" {
		os.Exit(crashHelper(dir))
	}
	testutil.Main(m)
}

// fixture is a root directory, held as a securefs.Root, next to an
// outside directory that nothing may ever touch.
type fixture struct {
	dir, out string
	root     *securefs.Root
}

const outsideSecret = "SLUICE-SECRET-OUTSIDE\n"

func newFixture(t testing.TB, mode securefs.Mode) *fixture {
	t.Helper()
	testutil.RequireRoot(t)
	base := t.TempDir()
	f := &fixture{dir: filepath.Join(base, "root"), out: filepath.Join(base, "outside")}
	for _, d := range []string{f.dir, f.out, filepath.Join(f.dir, "sub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	put(t, filepath.Join(f.out, "secret"), outsideSecret)
	root, err := securefs.OpenRoot(f.dir, mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	f.root = root
	return f
}

func put(t testing.TB, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func get(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (f *fixture) parent(t testing.TB, rel string) *Parent {
	t.Helper()
	p, err := ResolveParent(f.root, rel)
	if err != nil {
		t.Fatalf("ResolveParent(%q): %v", rel, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// outsideUntouched checks that the outside directory holds only its
// secret, unchanged.
func (f *fixture) outsideUntouched(t testing.TB) {
	t.Helper()
	if names := testutil.Listing(t, f.out); len(names) != 1 || names[0] != "secret" {
		t.Fatalf("outside dir changed: %v", names)
	}
	if got := get(t, filepath.Join(f.out, "secret")); got != outsideSecret {
		t.Fatalf("outside secret changed: %q", got)
	}
}

// noTemps fails if any temporary name is left in dir.
func noTemps(t testing.TB, dir string) {
	t.Helper()
	for _, n := range testutil.Listing(t, dir) {
		if strings.HasPrefix(n, TempPrefix) {
			t.Fatalf("temporary file left in %s: %s", dir, n)
		}
	}
}

// variant is one way of running: the resolver mode and whether the
// O_TMPFILE path or the named-temp fallback is taken.
type variant struct {
	name      string
	mode      securefs.Mode
	noTmpfile bool
}

var variants = []variant{
	{"openat2/tmpfile", securefs.ModeOpenat2, false},
	{"openat2/named", securefs.ModeOpenat2, true},
	{"fallback/tmpfile", securefs.ModeFallback, false},
	{"fallback/named", securefs.ModeFallback, true},
}

// journal records OnTemp/OnTempDone as a daemon's journal would.
type journal struct {
	open, all map[string]bool
}

func newJournal() *journal { return &journal{open: map[string]bool{}, all: map[string]bool{}} }

func (j *journal) hooks(o *WriteOptions) {
	o.OnTemp = func(_ *Parent, n string) error { j.open[n], j.all[n] = true, true; return nil }
	o.OnTempDone = func(_ *Parent, n string) { delete(j.open, n) }
}

func TestWriteModes(t *testing.T) {
	cases := []struct {
		name    string
		mode    WriteMode
		exists  bool
		want    error // nil: committed
		created bool
	}{
		{"create new", Create, false, nil, true},
		{"create existing", Create, true, ErrExists, false},
		{"overwrite existing", Overwrite, true, nil, false},
		{"overwrite missing", Overwrite, false, securefs.ErrNotExist, false},
		{"create_or_overwrite new", CreateOrOverwrite, false, nil, true},
		{"create_or_overwrite existing", CreateOrOverwrite, true, nil, false},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					f := newFixture(t, v.mode)
					target := filepath.Join(f.dir, "sub", "f.txt")
					if c.exists {
						put(t, target, "old\n")
					}
					j := newJournal()
					opts := WriteOptions{Mode: c.mode, noTmpfile: v.noTmpfile}
					j.hooks(&opts)
					p := f.parent(t, "sub/f.txt")
					res, err := Write(p, []byte("new content\n"), opts)
					if c.want != nil {
						if !errors.Is(err, c.want) {
							t.Fatalf("err = %v, want %v", err, c.want)
						}
						if c.exists {
							if got := get(t, target); got != "old\n" {
								t.Fatalf("refused write changed the file: %q", got)
							}
						} else if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
							t.Fatalf("refused write left a file: %v", err)
						}
					} else {
						if err != nil {
							t.Fatal(err)
						}
						if got := get(t, target); got != "new content\n" {
							t.Fatalf("content = %q", got)
						}
						want := WriteResult{SHA256: digest("new content\n"), Bytes: 12, Created: c.created}
						if res != want {
							t.Fatalf("result = %+v, want %+v", res, want)
						}
					}
					noTemps(t, filepath.Join(f.dir, "sub"))
					if len(j.open) != 0 {
						t.Fatalf("temps reported but never done: %v", j.open)
					}
					// The named-temp path always takes a name; the O_TMPFILE
					// path only to replace.
					if named := len(j.all) > 0; v.noTmpfile && c.want == nil && !named {
						t.Fatal("fallback path took no temporary name")
					} else if !v.noTmpfile && c.created && named {
						t.Fatalf("O_TMPFILE create took a temporary name: %v", j.all)
					}
				})
			}
		})
	}
}

func TestIfMatch(t *testing.T) {
	old := "old\n"
	cases := []struct {
		name, ifMatch string
		exists        bool
		want          error
	}{
		{"none on existing", "", true, nil},
		{"none on missing", "", false, nil},
		{"absent on missing", "absent", false, nil},
		{"absent on existing", "absent", true, ErrPrecondition},
		{"right digest", digest(old), true, nil},
		{"wrong digest", digest("other\n"), true, ErrPrecondition},
		{"digest on missing", digest(old), false, ErrPrecondition},
		{"malformed", "sha256:xyz", true, ErrInvalidIfMatch},
		{"uppercase", strings.ToUpper(digest(old)), true, ErrInvalidIfMatch},
		{"etag style", `"abc"`, true, ErrInvalidIfMatch},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					f := newFixture(t, v.mode)
					target := filepath.Join(f.dir, "f")
					if c.exists {
						put(t, target, old)
					}
					p := f.parent(t, "f")
					calls := 0
					_, err := Write(p, []byte("new\n"), WriteOptions{
						Mode:      CreateOrOverwrite,
						noTmpfile: v.noTmpfile,
						Check: func(cur Current) error {
							calls++
							return MatchIfMatch(c.ifMatch, cur)
						},
					})
					if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
						t.Fatalf("err = %v, want %v", err, c.want)
					}
					if calls != 1 {
						t.Fatalf("Check ran %d times", calls)
					}
					want := "new\n"
					if err != nil {
						want = old
					}
					if got, _ := os.ReadFile(target); (err == nil || c.exists) && string(got) != want {
						t.Fatalf("content = %q, want %q", got, want)
					}
					noTemps(t, f.dir)
				})
			}
		})
	}
}

// TestCheckSeesCommitTime: the precondition is evaluated on the file as it
// is at commit, not as it was when the call began. Another writer replaces
// the file while the content is being written (from the OnTemp hook, which
// runs before the commit in both paths); the stale if_match must fail.
func TestCheckSeesCommitTime(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t, v.mode)
			target := filepath.Join(f.dir, "f")
			put(t, target, "v1\n")
			p := f.parent(t, "f")
			j := newJournal()
			opts := WriteOptions{Mode: Overwrite, noTmpfile: v.noTmpfile,
				Check: func(cur Current) error { return MatchIfMatch(digest("v1\n"), cur) }}
			j.hooks(&opts)
			inner := opts.OnTemp
			opts.OnTemp = func(d *Parent, n string) error {
				if err := os.WriteFile(target+".other", []byte("v2\n"), 0o644); err != nil {
					return err
				}
				if err := os.Rename(target+".other", target); err != nil {
					return err
				}
				return inner(d, n)
			}
			if _, err := Write(p, []byte("mine\n"), opts); !errors.Is(err, ErrPrecondition) {
				t.Fatalf("err = %v, want ErrPrecondition", err)
			}
			if got := get(t, target); got != "v2\n" {
				t.Fatalf("content = %q, want the other writer's", got)
			}
			noTemps(t, f.dir)
			if len(j.open) != 0 {
				t.Fatalf("temps reported but never done: %v", j.open)
			}
		})
	}
}

func TestCheckErrorCommitsNothing(t *testing.T) {
	errGen := errors.New("task generation moved")
	for _, v := range variants {
		for _, exists := range []bool{false, true} {
			t.Run(v.name, func(t *testing.T) {
				f := newFixture(t, v.mode)
				target := filepath.Join(f.dir, "f")
				if exists {
					put(t, target, "old\n")
				}
				p := f.parent(t, "f")
				j := newJournal()
				opts := WriteOptions{Mode: CreateOrOverwrite, noTmpfile: v.noTmpfile,
					Check: func(Current) error { return errGen }}
				j.hooks(&opts)
				if _, err := Write(p, []byte("new\n"), opts); !errors.Is(err, errGen) {
					t.Fatalf("err = %v, want the check's", err)
				}
				if exists {
					if got := get(t, target); got != "old\n" {
						t.Fatalf("content = %q", got)
					}
					if names := testutil.Listing(t, f.dir); len(names) != 2 {
						t.Fatalf("dir = %v", names)
					}
				} else if names := testutil.Listing(t, f.dir); len(names) != 1 || names[0] != "sub" {
					t.Fatalf("dir = %v", names)
				}
				if len(j.open) != 0 {
					t.Fatalf("temps reported but never done: %v", j.open)
				}
			})
		}
	}
}

func TestNewFileModeAndOwner(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t, v.mode)
			cases := []struct {
				name     string
				opts     WriteOptions
				perm     uint32
				uid, gid uint32
			}{
				{"default", WriteOptions{}, 0o644, 0, 0},
				{"explicit", WriteOptions{Perm: 0o640, UID: 1234, GID: 2345}, 0o640, 1234, 2345},
				{"setuid masked", WriteOptions{Perm: 0o4755, UID: 1234, GID: 2345}, 0o755, 1234, 2345},
				{"keep daemon's ids", WriteOptions{Perm: 0o600, UID: -1, GID: -1}, 0o600, 0, 0},
			}
			for i, c := range cases {
				name := "n" + string(rune('a'+i))
				c.opts.noTmpfile = v.noTmpfile
				if _, err := Write(f.parent(t, name), []byte("x"), c.opts); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				var st unix.Stat_t
				if err := unix.Lstat(filepath.Join(f.dir, name), &st); err != nil {
					t.Fatal(err)
				}
				if st.Mode&0o7777 != c.perm || st.Uid != c.uid || st.Gid != c.gid {
					t.Errorf("%s: mode %o uid %d gid %d, want %o %d %d", c.name, st.Mode&0o7777, st.Uid, st.Gid, c.perm, c.uid, c.gid)
				}
			}
			// A replaced file keeps its owner and permission bits, but
			// never a setuid bit.
			target := filepath.Join(f.dir, "script")
			put(t, target, "#!/bin/sh\n")
			if err := os.Chown(target, 4321, 5432); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(target, 0o4751); err != nil {
				t.Fatal(err)
			}
			if _, err := Write(f.parent(t, "script"), []byte("#!/bin/sh\necho\n"), WriteOptions{Mode: Overwrite, Perm: 0o600, UID: 1, GID: 1, noTmpfile: v.noTmpfile}); err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			if err := unix.Lstat(target, &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode&0o7777 != 0o751 || st.Uid != 4321 || st.Gid != 5432 {
				t.Errorf("replaced: mode %o uid %d gid %d, want 751 4321 5432", st.Mode&0o7777, st.Uid, st.Gid)
			}
		})
	}
}

// TestFinalSymlink: a symlink as the final component, to a file outside
// the root. Writes refuse it in every mode; delete removes the link only.
func TestFinalSymlink(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t, v.mode)
			link := filepath.Join(f.dir, "link")
			secret := filepath.Join(f.out, "secret")
			if err := os.Symlink(secret, link); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../outside/missing", filepath.Join(f.dir, "dangling")); err != nil {
				t.Fatal(err)
			}
			for _, m := range []WriteMode{Create, Overwrite, CreateOrOverwrite} {
				for _, name := range []string{"link", "dangling"} {
					_, err := Write(f.parent(t, name), []byte("pwned\n"), WriteOptions{Mode: m, noTmpfile: v.noTmpfile})
					want := ErrNotRegular
					if m == Create {
						want = ErrExists
					}
					if !errors.Is(err, want) {
						t.Fatalf("%v %s: err = %v, want %v", m, name, err, want)
					}
				}
			}
			if tgt, err := os.Readlink(link); err != nil || tgt != secret {
				t.Fatalf("link changed: %q %v", tgt, err)
			}
			f.outsideUntouched(t)
			noTemps(t, f.dir)

			res, err := Delete(f.parent(t, "link"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := (DeleteResult{Kind: securefs.KindSymlink, SHA256: digest(secret), Size: int64(len(secret))}); res != want {
				t.Fatalf("result = %+v, want %+v", res, want)
			}
			if _, err := os.Lstat(link); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("link still there: %v", err)
			}
			f.outsideUntouched(t)
		})
	}
}

// TestHardlinkReplaced: a hard link in the root to a file outside it is
// replaced by a write, never written through, and a delete only drops
// the name.
func TestHardlinkReplaced(t *testing.T) {
	f := newFixture(t, securefs.ModeOpenat2)
	if err := os.Link(filepath.Join(f.out, "secret"), filepath.Join(f.dir, "hl")); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(f.parent(t, "hl"), []byte("pwned\n"), WriteOptions{Mode: Overwrite}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, filepath.Join(f.dir, "hl")); got != "pwned\n" {
		t.Fatalf("content = %q", got)
	}
	f.outsideUntouched(t)
	if err := os.Link(filepath.Join(f.out, "secret"), filepath.Join(f.dir, "hl2")); err != nil {
		t.Fatal(err)
	}
	if _, err := Delete(f.parent(t, "hl2"), nil); err != nil {
		t.Fatal(err)
	}
	f.outsideUntouched(t)
}

func TestWriteRefusesNonRegular(t *testing.T) {
	f := newFixture(t, securefs.ModeOpenat2)
	if err := unix.Mkfifo(filepath.Join(f.dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		kind api.Kind
	}{{"sub", securefs.KindDir}, {"fifo", securefs.KindFIFO}} {
		_, err := Write(f.parent(t, c.name), []byte("x"), WriteOptions{Mode: CreateOrOverwrite})
		var ke *KindError
		if !errors.Is(err, ErrNotRegular) || !errors.As(err, &ke) || ke.Kind != c.kind {
			t.Fatalf("%s: err = %v, want a %s KindError", c.name, err, c.kind)
		}
	}
	// The reserved prefix is not a tool's to write or delete.
	put(t, filepath.Join(f.dir, TempPrefix+"x"), "x")
	if _, err := Write(f.parent(t, TempPrefix+"x"), []byte("x"), WriteOptions{Mode: CreateOrOverwrite}); !errors.Is(err, ErrBadName) {
		t.Fatalf("write to a temp name: %v", err)
	}
	if _, err := Delete(f.parent(t, TempPrefix+"x"), nil); !errors.Is(err, ErrBadName) {
		t.Fatalf("delete of a temp name: %v", err)
	}
	noTemps(t, filepath.Join(f.dir, "sub"))
}

func TestResolveParent(t *testing.T) {
	cases := []struct {
		path string
		want error // nil: resolves
		dir  string
		name string
	}{
		{"f", nil, ".", "f"},
		{"sub/f", nil, "sub", "f"},
		{"./sub//f", nil, "sub", "f"},
		{"sub/../f", nil, ".", "f"},
		{"in_link/f", nil, "sub", "f"},
		{"sub/...", nil, "sub", "..."},
		{"sub/" + strings.Repeat("n", 255), nil, "sub", strings.Repeat("n", 255)},
		{"", ErrBadName, "", ""},
		{"sub/", ErrBadName, "", ""},
		{".", ErrBadName, "", ""},
		{"..", ErrBadName, "", ""},
		{"sub/.", ErrBadName, "", ""},
		{"sub/..", ErrBadName, "", ""},
		{"sub/a\x00b", ErrBadName, "", ""},
		{"sub\x00/f", securefs.ErrInvalidPath, "", ""},
		{"sub/" + strings.Repeat("n", 256), ErrBadName, "", ""},
		{"missing/f", securefs.ErrNotExist, "", ""},
		{"afile/f", securefs.ErrNotExist, "", ""},
		{"../f", securefs.ErrPathEscapes, "", ""},
		{"../outside/f", securefs.ErrPathEscapes, "", ""},
		{"/f", securefs.ErrPathEscapes, "", ""},
		{"/etc/passwd", securefs.ErrPathEscapes, "", ""},
		{"out_link/f", securefs.ErrPathEscapes, "", ""},
		{"out_rel_link/f", securefs.ErrPathEscapes, "", ""},
		{"sub/../../outside/f", securefs.ErrPathEscapes, "", ""},
	}
	for _, mode := range []securefs.Mode{securefs.ModeOpenat2, securefs.ModeFallback} {
		t.Run(mode.String(), func(t *testing.T) {
			f := newFixture(t, mode)
			put(t, filepath.Join(f.dir, "afile"), "x")
			for link, target := range map[string]string{"in_link": "sub", "out_link": f.out, "out_rel_link": "../outside"} {
				if err := os.Symlink(target, filepath.Join(f.dir, link)); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range cases {
				p, err := ResolveParent(f.root, c.path)
				if c.want != nil {
					if !errors.Is(err, c.want) {
						t.Errorf("%q: err = %v, want %v", c.path, err, c.want)
					}
					if errors.Is(c.want, ErrBadName) && !errors.Is(err, securefs.ErrInvalidPath) {
						t.Errorf("%q: a bad name should be ErrInvalidPath too: %v", c.path, err)
					}
					if p != nil {
						p.Close()
					}
					continue
				}
				if err != nil {
					t.Errorf("%q: %v", c.path, err)
					continue
				}
				abs, rel, err := p.Locate()
				wantRel := c.name
				if c.dir != "." {
					wantRel = c.dir + "/" + c.name
				}
				if err != nil || p.Name != c.name || rel != wantRel || abs != filepath.Join(f.dir, wantRel) {
					t.Errorf("%q: name %q rel %q abs %q (%v), want %q %q", c.path, p.Name, rel, abs, err, c.name, wantRel)
				}
				p.Close()
			}
		})
	}
}

func TestStat(t *testing.T) {
	f := newFixture(t, securefs.ModeOpenat2)
	put(t, filepath.Join(f.dir, "file"), "hello\n")
	if err := os.Symlink(filepath.Join(f.out, "secret"), filepath.Join(f.dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(f.dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := map[string]api.Kind{"file": securefs.KindFile, "link": securefs.KindSymlink, "sub": securefs.KindDir, "fifo": securefs.KindFIFO, "nope": KindAbsent}
	for name, kind := range want {
		cur, err := f.parent(t, name).Stat()
		if err != nil || cur.Kind != kind || cur.Exists() != (kind != KindAbsent) {
			t.Errorf("%s: %+v %v, want %s", name, cur, err, kind)
		}
		sum, err := cur.SHA256()
		if kind == securefs.KindFile {
			if err != nil || sum != digest("hello\n") || cur.Size != 6 {
				t.Errorf("file: sha256 %q size %d %v", sum, cur.Size, err)
			}
		} else if !errors.Is(err, ErrNotRegular) {
			t.Errorf("%s: SHA256 err = %v, want ErrNotRegular", name, err)
		}
	}
	// The digest is of the inode the stat saw: swapped since, it fails.
	p := f.parent(t, "file")
	cur, err := p.Stat()
	if err != nil {
		t.Fatal(err)
	}
	put(t, filepath.Join(f.dir, "file2"), "other\n")
	if err := os.Rename(filepath.Join(f.dir, "file2"), filepath.Join(f.dir, "file")); err != nil {
		t.Fatal(err)
	}
	if _, err := cur.SHA256(); !errors.Is(err, ErrChanged) {
		t.Fatalf("SHA256 after a swap: %v, want ErrChanged", err)
	}
	if err := MatchIfMatch(digest("hello\n"), cur); !errors.Is(err, ErrPrecondition) {
		t.Fatalf("if_match after a swap: %v, want ErrPrecondition", err)
	}
}

func TestDelete(t *testing.T) {
	for _, mode := range []securefs.Mode{securefs.ModeOpenat2, securefs.ModeFallback} {
		t.Run(mode.String(), func(t *testing.T) {
			f := newFixture(t, mode)
			put(t, filepath.Join(f.dir, "file"), "hello\n")
			put(t, filepath.Join(f.dir, "keep"), "keep\n")
			if err := os.Symlink(filepath.Join(f.out, "secret"), filepath.Join(f.dir, "link")); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mkfifo(filepath.Join(f.dir, "fifo"), 0o644); err != nil {
				t.Fatal(err)
			}

			res, err := Delete(f.parent(t, "file"), func(c Current) error { return MatchIfMatch(digest("hello\n"), c) })
			if err != nil {
				t.Fatal(err)
			}
			if want := (DeleteResult{Kind: securefs.KindFile, SHA256: digest("hello\n"), Size: 6}); res != want {
				t.Fatalf("result = %+v, want %+v", res, want)
			}
			if _, err := Delete(f.parent(t, "file"), nil); !errors.Is(err, securefs.ErrNotExist) {
				t.Fatalf("delete missing: %v", err)
			}
			if _, err := Delete(f.parent(t, "sub"), nil); !errors.Is(err, ErrIsDir) || !errors.Is(err, ErrNotRegular) {
				t.Fatalf("delete dir: %v", err)
			}
			if _, err := Delete(f.parent(t, "fifo"), nil); !errors.Is(err, ErrNotRegular) || errors.Is(err, ErrIsDir) {
				t.Fatalf("delete fifo: %v", err)
			}
			if _, err := Delete(f.parent(t, "keep"), func(c Current) error { return MatchIfMatch(digest("other\n"), c) }); !errors.Is(err, ErrPrecondition) {
				t.Fatalf("delete with a wrong if_match: %v", err)
			}
			if _, err := Delete(f.parent(t, "keep"), func(c Current) error { return MatchIfMatch(IfMatchAbsent, c) }); !errors.Is(err, ErrPrecondition) {
				t.Fatalf("delete with if_match absent: %v", err)
			}
			if _, err := Delete(f.parent(t, "link"), nil); err != nil {
				t.Fatal(err)
			}
			if names := testutil.Listing(t, f.dir); strings.Join(names, ",") != "fifo,keep,sub" {
				t.Fatalf("dir = %v", names)
			}
			if got := get(t, filepath.Join(f.dir, "keep")); got != "keep\n" {
				t.Fatalf("keep = %q", got)
			}
			f.outsideUntouched(t)
		})
	}
}

func TestRemoveTemp(t *testing.T) {
	f := newFixture(t, securefs.ModeOpenat2)
	tmp := TempPrefix + "abc"
	put(t, filepath.Join(f.dir, tmp), "partial")
	put(t, filepath.Join(f.dir, "user.txt"), "mine")
	if err := os.Mkdir(filepath.Join(f.dir, TempPrefix+"dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(f.out, "secret"), filepath.Join(f.dir, TempPrefix+"link")); err != nil {
		t.Fatal(err)
	}
	p := f.parent(t, "x")
	if err := RemoveTemp(p, tmp); err != nil {
		t.Fatal(err)
	}
	if err := RemoveTemp(p, tmp); !errors.Is(err, securefs.ErrNotExist) {
		t.Fatalf("second remove: %v", err)
	}
	for name, want := range map[string]error{
		"user.txt":          ErrBadName,
		"../" + tmp:         ErrBadName,
		TempPrefix + "dir":  ErrNotRegular,
		TempPrefix + "link": ErrNotRegular,
	} {
		if err := RemoveTemp(p, name); !errors.Is(err, want) {
			t.Errorf("RemoveTemp(%q) = %v, want %v", name, err, want)
		}
	}
	if names := testutil.Listing(t, f.dir); strings.Join(names, ",") != TempPrefix+"dir,"+TempPrefix+"link,sub,user.txt" {
		t.Fatalf("dir = %v", names)
	}
	f.outsideUntouched(t)
}

func TestParseWriteMode(t *testing.T) {
	for _, m := range []WriteMode{Create, Overwrite, CreateOrOverwrite} {
		if got, err := ParseWriteMode(m.String()); err != nil || got != m {
			t.Errorf("%v: %v %v", m, got, err)
		}
	}
	if _, err := ParseWriteMode("append"); err == nil {
		t.Error("append parsed")
	}
	var zero WriteOptions
	if zero.Mode != Create {
		t.Error("the zero mode must be Create: it never destroys anything")
	}
}

// TestWriteTempName: with TempName set, an overwrite's temporary name is
// that one (the only name OnTemp sees) on every variant; a name already
// taken fails the write with EEXIST and is left as it was; a name without
// the prefix is refused.
func TestWriteTempName(t *testing.T) {
	const name = TempPrefix + "c-01CALLID"
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t, v.mode)
			target := filepath.Join(f.dir, "f.txt")
			put(t, target, "old\n")
			var seen []string
			opts := WriteOptions{Mode: Overwrite, TempName: name, noTmpfile: v.noTmpfile,
				OnTemp: func(_ *Parent, n string) error { seen = append(seen, n); return nil }}
			p := f.parent(t, "f.txt")
			if _, err := Write(p, []byte("new\n"), opts); err != nil {
				t.Fatal(err)
			}
			if strings.Join(seen, ",") != name {
				t.Fatalf("temp names %v, want only %s", seen, name)
			}
			if b, _ := os.ReadFile(target); string(b) != "new\n" {
				t.Fatalf("target %q", b)
			}
			put(t, filepath.Join(f.dir, name), "someone's")
			if _, err := Write(p, []byte("newer\n"), opts); !errors.Is(err, unix.EEXIST) {
				t.Fatalf("taken temp name: %v, want EEXIST", err)
			}
			if b, _ := os.ReadFile(filepath.Join(f.dir, name)); string(b) != "someone's" {
				t.Fatalf("the taken name changed: %q", b)
			}
			if b, _ := os.ReadFile(target); string(b) != "new\n" {
				t.Fatalf("target %q after a failed write", b)
			}
			opts.TempName = "plain"
			if _, err := Write(p, []byte("x"), opts); !errors.Is(err, ErrBadName) {
				t.Fatalf("temp name without the prefix: %v", err)
			}
		})
	}
}

// TestWriteDeferDirSync: a write with DeferDirSync commits without a
// directory fsync (a changeset's commit syncs each directory once, after
// its writes); Parent.SyncDir is that one sync.
func TestWriteDeferDirSync(t *testing.T) {
	f := newFixture(t, securefs.ModeOpenat2)
	var synced int
	TestHookSyncDir = func(int) error { synced++; return nil }
	t.Cleanup(func() { TestHookSyncDir = nil })
	for _, name := range []string{"new.txt", "new.txt"} { // a create, then an overwrite
		p := f.parent(t, name)
		if _, err := Write(p, []byte("x\n"), WriteOptions{Mode: CreateOrOverwrite, DeferDirSync: true}); err != nil {
			t.Fatal(err)
		}
	}
	if synced != 0 {
		t.Fatalf("%d directory fsyncs with DeferDirSync, want 0", synced)
	}
	p := f.parent(t, "new.txt")
	if err := p.SyncDir(); err != nil || synced != 1 {
		t.Fatalf("SyncDir: %v, %d fsyncs", err, synced)
	}
	if _, err := Write(p, []byte("y\n"), WriteOptions{Mode: CreateOrOverwrite}); err != nil || synced != 2 {
		t.Fatalf("a write without DeferDirSync: %v, %d fsyncs, want its own", err, synced)
	}
}
