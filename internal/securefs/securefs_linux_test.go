package securefs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

var modes = []Mode{ModeOpenat2, ModeFallback}

func class(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrPathEscapes):
		return "escapes"
	case errors.Is(err, ErrNotExist):
		return "notexist"
	case errors.Is(err, ErrInvalidPath):
		return "invalid"
	}
	return "other: " + err.Error()
}

// wantClasses is what the resolver may say for a case's final reason.
func wantClasses(reason api.Reason) []string {
	switch reason {
	case "allowed", "not_a_file", "not_a_directory", "unsupported_file_type":
		return []string{"ok"}
	case "outside_roots":
		return []string{"escapes", "nomatch"}
	case "not_found":
		return []string{"notexist"}
	case "invalid_path":
		return []string{"invalid", "lexical"}
	case "never_listed":
		return []string{"ok", "notexist", "never"}
	}
	return nil
}

func openRoots(t *testing.T, fx *escapetest.Fixture, mode Mode) map[string]*Root {
	t.Helper()
	roots := map[string]*Root{}
	base, err := OpenRoot(fx.Base, mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { base.Close() })
	for _, r := range []string{"workspace/src", "workspace/tests"} {
		root, err := base.OpenRootBeneath(r)
		if err != nil {
			t.Fatalf("open root %s: %v", r, err)
		}
		t.Cleanup(func() { root.Close() })
		roots[r] = root
	}
	return roots
}

// TestEscapeTable runs the shared table against the resolver alone, in
// both modes: each root-relative path must resolve to the class its reason
// implies, both modes must agree, whatever resolves must lie beneath its
// root (by the kernel's name for the fd), and nothing outside may be read.
func TestEscapeTable(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	tool := &authz.Tool{Operation: "read", Roots: []string{"workspace/src", "workspace/tests"}, Never: []string{".env", "*.pem", "private/**"}}
	rootsBy := map[Mode]map[string]*Root{}
	for _, m := range modes {
		rootsBy[m] = openRoots(t, fx, m)
	}
	for _, c := range escapetest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			p := fx.PathFor(c)
			got := map[Mode]string{}
			for _, mode := range modes {
				got[mode] = resolveClass(t, fx, rootsBy[mode], tool, p, c)
			}
			if got[ModeOpenat2] != got[ModeFallback] {
				t.Errorf("modes disagree: openat2 %q, fallback %q", got[ModeOpenat2], got[ModeFallback])
			}
			ok := false
			for _, w := range wantClasses(c.Want) {
				ok = ok || got[ModeOpenat2] == w
			}
			if !ok {
				t.Errorf("resolver said %q; case wants %s (one of %v)", got[ModeOpenat2], c.Want, wantClasses(c.Want))
			}
		})
	}
}

func resolveClass(t *testing.T, fx *escapetest.Fixture, roots map[string]*Root, tool *authz.Tool, p string, c escapetest.Case) string {
	t.Helper()
	if authz.CheckPath(p) != "" {
		return "lexical"
	}
	matches := authz.MatchRoots(tool, p)
	if len(matches) == 0 {
		return "nomatch"
	}
	for _, m := range matches {
		if authz.NeverMatch(tool, m.Rel) {
			return "never"
		}
	}
	m := matches[0]
	root := roots[m.Root]
	h, err := root.Resolve(m.Rel)
	if err != nil {
		return class(err)
	}
	defer h.Close()
	rp, _ := root.Path()
	if hp, err := h.Path(); err == nil {
		if hp != rp && !strings.HasPrefix(hp, rp+"/") {
			t.Fatalf("ESCAPE: %q resolved to %q, not beneath %q", p, hp, rp)
		}
	} else if h.Kind != KindSocket {
		t.Fatalf("no path for resolved fd: %v", err)
	}
	if h.Kind == KindFile && c.Want != "never_listed" && c.Want != "unsupported_file_type" {
		// (A hard link to a secret resolves: the decision refuses it.)
		f, err := h.Open()
		if err != nil {
			t.Fatalf("open resolved file: %v", err)
		}
		b, _ := io.ReadAll(io.LimitReader(f, 1<<16))
		f.Close()
		if strings.Contains(string(b), escapetest.Secret) {
			t.Fatalf("ESCAPE: read a secret through %q", p)
		}
	}
	return "ok"
}

// TestOpenRefusesSpecialFiles: a handle on a FIFO or device is never
// opened for I/O, so nothing blocks and no device is touched.
func TestOpenRefusesSpecialFiles(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	for _, mode := range modes {
		root := openRoots(t, fx, mode)["workspace/src"]
		for _, name := range []string{"fifo", "devnode"} {
			h, err := root.Resolve(name)
			if err != nil {
				t.Fatalf("%v: resolve %s: %v", mode, name, err)
			}
			done := make(chan error, 1)
			go func() { _, err := h.Open(); done <- err }()
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("%v: Open of %s (%s) succeeded", mode, name, h.Kind)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%v: Open of %s blocked", mode, name)
			}
			h.Close()
		}
	}
}

// TestSymlinkSwapRace swaps a name between a file inside the root and a
// symlink leading out, as fast as it can for 2 s, while reads run in both
// modes. No read may ever return a byte from outside.
func TestSymlinkSwapRace(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	src := filepath.Join(fx.Base, "workspace/src")
	var wg sync.WaitGroup
	inside := filepath.Join(src, "race.tmp")
	// race.new was renamed away and sub2 may not exist yet: only
	// their absence may make a remove fail.
	remove := func(p string) error {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	sw := testutil.Swap(t, func(i int) error {
		tmp := filepath.Join(src, "race.new")
		if err := remove(tmp); err != nil {
			return err
		}
		var err error
		if i%2 == 0 {
			err = os.Symlink("../../secret.txt", tmp)
		} else {
			err = errors.Join(os.WriteFile(inside, []byte("inside\n"), 0o644), os.Symlink("race.tmp", tmp))
		}
		if err != nil {
			return err
		}
		// and a directory swap: sub2 is a real dir or a link out
		if err := errors.Join(os.Rename(tmp, filepath.Join(src, "race")), remove(filepath.Join(src, "sub2"))); err != nil {
			return err
		}
		if i%3 == 0 {
			return os.Symlink("../..", filepath.Join(src, "sub2"))
		}
		return os.Mkdir(filepath.Join(src, "sub2"), 0o755)
	})
	var reads, okReads atomic.Int64
	deadline := time.Now().Add(2 * time.Second)
	for _, mode := range modes {
		root := openRoots(t, fx, mode)["workspace/src"]
		for _, name := range []string{"race", "sub2/secret.txt", "sub2/../race"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					reads.Add(1)
					h, err := root.Resolve(name)
					if err != nil {
						continue
					}
					if h.Kind == KindFile {
						if f, err := h.Open(); err == nil {
							b, _ := io.ReadAll(f)
							f.Close()
							okReads.Add(1)
							if strings.Contains(string(b), escapetest.Secret) {
								t.Errorf("ESCAPE (%v): read a secret via %q under a swap race", mode, name)
							}
						}
					}
					h.Close()
				}
			}()
		}
	}
	wg.Wait() // the readers stop at the deadline
	if err := sw.Stop(); err != nil {
		t.Fatalf("swap: %v", err)
	}
	t.Logf("%d swaps, %d resolutions, %d reads of the inside file, none outside", sw.Swaps(), reads.Load(), okReads.Load())
	if sw.Swaps() == 0 {
		t.Fatal("no swap completed: the race proved nothing")
	}
	if okReads.Load() == 0 {
		t.Fatal("the race never read the inside file: the test proved nothing")
	}
}

// FuzzResolve: whatever the resolver hands back lies beneath the root.
func FuzzResolve(f *testing.F) {
	for _, c := range escapetest.Cases {
		f.Add(strings.TrimPrefix(strings.TrimPrefix(c.Path, "./"), "workspace/src/"))
	}
	fx := escapetest.Build(f)
	root, err := OpenRoot(filepath.Join(fx.Base, "workspace/src"), ModeOpenat2)
	if err != nil {
		f.Fatal(err)
	}
	defer root.Close()
	rp, _ := root.Path()
	f.Fuzz(func(t *testing.T, p string) {
		h, err := root.Resolve(p)
		if err != nil {
			return
		}
		defer h.Close()
		hp, err := h.Path()
		if err != nil {
			if h.Kind == KindSocket {
				return
			}
			t.Fatal(err)
		}
		if hp != rp && !strings.HasPrefix(hp, rp+"/") {
			t.Fatalf("ESCAPE: %q resolved to %q", p, hp)
		}
	})
}

// TestErrorsKeepErrno: a classified error matches its sentinel and still
// matches the kernel's errno.
func TestErrorsKeepErrno(t *testing.T) {
	for _, tc := range []struct {
		errno    unix.Errno
		sentinel error
	}{{unix.EXDEV, ErrPathEscapes}, {unix.ELOOP, ErrPathEscapes}, {unix.ENOENT, ErrNotExist}, {unix.ENOTDIR, ErrNotExist}, {unix.ENAMETOOLONG, ErrInvalidPath}} {
		err := classify(tc.errno)
		if !errors.Is(err, tc.sentinel) || !errors.Is(err, tc.errno) {
			t.Errorf("%v: classified %v matches sentinel %v, errno %v", tc.errno, err, errors.Is(err, tc.sentinel), errors.Is(err, tc.errno))
		}
	}
}
