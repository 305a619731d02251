//go:build linux

package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/changeset"
	"github.com/sluicehq/sluice/internal/fsview"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// scratchFixture is a workspace (owned by root, as a host user's files
// are: not the container's uid) served by a view that hides .env and
// presents the workspace writable, and a Spec whose Scratch makes it
// writable.
type scratchFixture struct {
	ws   string
	view *View
}

func newScratchFixture(t testing.TB, r *Runner) *scratchFixture {
	t.Helper()
	base := t.TempDir()
	testutil.Must(t, os.Chmod(base, 0o755))
	ws := filepath.Join(base, "ws")
	for name, body := range map[string]string{
		"a.txt": "alpha\n", "b.txt": "beta\n", "keep.txt": "keep\n", ".env": "SLUICE-SECRET=1\n",
		"sub/c.txt": "gamma\n", "private.txt": "owner only\n",
	} {
		testutil.Must(t, os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755))
		testutil.Must(t, os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644))
	}
	testutil.Must(t, os.Chmod(filepath.Join(ws, "private.txt"), 0o600))
	root, err := securefs.OpenRoot(ws, securefs.ModeAuto)
	if err != nil {
		t.Fatal(err)
	}
	v, err := r.NewView([]ViewMount{{Source: fsview.Source{Root: root}, Dest: ws, Writable: true}},
		func(i int, rel string) bool { return rel == ".env" }, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return &scratchFixture{ws: ws, view: v}
}

func (f *scratchFixture) spec(t testing.TB, maxBytes int64) *Spec {
	s := defaultSpec(t)
	s.Mounts = f.view.Mounts
	s.View = f.view
	s.Cwd = f.ws
	s.Scratch = &ScratchSpec{Dests: []string{f.ws}, MaxBytes: maxBytes, MaxFiles: 1000}
	return s
}

// digests is every host file's sha256 beneath dir.
func digests(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if fi.IsDir() {
			out[rel] = fmt.Sprintf("dir %o", fi.Mode().Perm())
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h := sha256.Sum256(b)
		out[rel] = fmt.Sprintf("%o %s", fi.Mode().Perm(), hex.EncodeToString(h[:]))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runHeld runs script in box b (sh -c) and returns its result, the box
// kept (not released) so its scratch can be taken.
func runHeld(t *testing.T, b *Box, script string) *Result {
	t.Helper()
	res, err := b.ExecHeld(context.Background(), []string{"sh", "-c", script}, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(h[:])
}

// TestScratchChangeset: a container edits, creates and deletes files and
// makes a directory in a writable mount, as its own uid (which owns
// nothing there); the host's files stay as they were, and the scratch
// layer reads as exactly those changes.
func TestScratchChangeset(t *testing.T) { scratchChangeset(t) }

// TestScratchChangesetLegacyLayers: the same, with the layers given as
// /proc/self/fd paths, as on a kernel without fd-valued overlay layer
// options (Debian 12's 6.1).
func TestScratchChangesetLegacyLayers(t *testing.T) {
	testLegacyLayers = true
	defer func() { testLegacyLayers = false }()
	scratchChangeset(t)
}

func scratchChangeset(t *testing.T) {
	r := newRunner(t)
	f := newScratchFixture(t, r)
	before := digests(t, f.ws)
	b, err := r.Create(f.spec(t, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	res := runHeld(t, b, `set -e
echo more >> a.txt
rm b.txt
echo new > new.txt
mkdir -p made/deeper
echo x > made/deeper/f
echo changed > sub/c.txt
rmdir made/deeper 2>/dev/null || true
rm made/deeper/f && rmdir made/deeper
echo ok; id -u`)
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "ok") {
		t.Fatalf("exit %d: %s %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if got := strings.TrimSpace(strings.TrimPrefix(string(res.Stdout), "ok\n")); got != fmt.Sprint(b.UID()) {
		t.Fatalf("ran as %q, want the box's uid %d", got, b.UID())
	}
	s := b.TakeScratch()
	if s == nil || len(s.Layers) != 1 || s.Layers[0].Dest != f.ws {
		t.Fatalf("TakeScratch: %+v", s)
	}
	defer s.Close()
	if b.TakeScratch() != nil {
		t.Fatal("second TakeScratch returned a layer")
	}
	got, err := changeset.Read(s.Layers[0].Upper, 100)
	if err != nil {
		t.Fatal(err)
	}
	// Modes: a file copied up keeps the mode the view presents (0644|0666),
	// a new file gets the container's umask's, a new directory too.
	var paths []string
	for _, e := range got {
		paths = append(paths, fmt.Sprintf("%s %s", e.Kind, e.Path))
	}
	want := []string{"file a.txt", "whiteout b.txt", "dir made", "file new.txt", "dir sub", "file sub/c.txt"}
	if !reflect.DeepEqual(paths, want) {
		t.Fatalf("changeset %v, want %v (%+v)", paths, want, got)
	}
	bySum := map[string]string{}
	for _, e := range got {
		bySum[e.Path] = e.SHA256
	}
	if bySum["a.txt"] != sum("alpha\nmore\n") || bySum["new.txt"] != sum("new\n") || bySum["sub/c.txt"] != sum("changed\n") {
		t.Fatalf("digests: %v", bySum)
	}
	// The new file belongs to the container's uid.
	var st unix.Stat_t
	testutil.Must(t, unix.Fstatat(int(s.Layers[0].Upper.Fd()), "new.txt", &st, unix.AT_SYMLINK_NOFOLLOW))
	if int(st.Uid) != b.UID() {
		t.Fatalf("new.txt owned by %d, want %d", st.Uid, b.UID())
	}
	rf, err := changeset.Open(s.Layers[0].Upper, "a.txt")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(rf)
	rf.Close()
	if string(body) != "alpha\nmore\n" {
		t.Fatalf("Open a.txt: %q", body)
	}
	if after := digests(t, f.ws); !reflect.DeepEqual(before, after) {
		t.Fatalf("host files changed:\nbefore %v\nafter  %v", before, after)
	}
}

// TestScratchHidesNeverListed: a never-listed host file does not exist
// in a writable mount, by name or in a listing; hiding it is the view's,
// below the overlay.
func TestScratchHidesNeverListed(t *testing.T) {
	r := newRunner(t)
	f := newScratchFixture(t, r)
	b, err := r.Create(f.spec(t, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	res := runHeld(t, b, `ls -a; cat .env; test -e .env && echo VISIBLE; cat private.txt`)
	out := string(res.Stdout) + string(res.Stderr)
	if strings.Contains(out, "SLUICE-SECRET") || strings.Contains(out, "VISIBLE") || strings.Contains(string(res.Stdout), ".env") {
		t.Fatalf("never-listed .env visible: %s", out)
	}
	if !strings.Contains(string(res.Stdout), "keep.txt") {
		t.Fatalf("listing: %s", out)
	}
	b.dropScratch()
}

// TestScratchBadEntries: what may not be part of a changeset made in the
// container is refused by changeset.Read.
func TestScratchBadEntries(t *testing.T) {
	r := newRunner(t)
	f := newScratchFixture(t, r)
	for _, c := range []struct{ name, script, path string }{
		{"symlink", "ln -s /etc/passwd l", "l"},
		{"fifo", "mkfifo p", "p"},
		{"hardlink", "echo x > h1 && ln h1 h2", "h1"},
		{"hardlink-lower", "ln keep.txt k2", "k2"},
		{"setuid", "echo x > s && chmod u+s s", "s"},
		{"setgid", "echo x > g && chmod g+s g", "g"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := r.Create(f.spec(t, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Release()
			res := runHeld(t, b, c.script)
			if res.ExitCode != 0 {
				t.Fatalf("exit %d: %s", res.ExitCode, res.Stderr)
			}
			s := b.TakeScratch()
			defer s.Close()
			_, err = changeset.Read(s.Layers[0].Upper, 100)
			var bad *changeset.BadEntryError
			if !errors.As(err, &bad) {
				t.Fatalf("want a BadEntryError, got %v", err)
			}
			if c.name != "hardlink-lower" && bad.Path != c.path {
				t.Fatalf("refused %q, want %q", bad.Path, c.path)
			}
		})
	}
}

// TestScratchFull: a full scratch layer is ENOSPC inside; nothing of it
// reaches the host.
func TestScratchFull(t *testing.T) {
	r := newRunner(t)
	f := newScratchFixture(t, r)
	before := digests(t, f.ws)
	b, err := r.Create(f.spec(t, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	res := runHeld(t, b, `dd if=/dev/zero of=big bs=64k count=64 2>&1; echo rc=$?`)
	out := string(res.Stdout)
	if !strings.Contains(out, "No space left on device") || strings.Contains(out, "rc=0") {
		t.Fatalf("want ENOSPC: %s", out)
	}
	b.dropScratch()
	if after := digests(t, f.ws); !reflect.DeepEqual(before, after) {
		t.Fatalf("host files changed:\nbefore %v\nafter  %v", before, after)
	}
}

// TestScratchUnreachable: the scratch tmpfs is mounted nowhere in the
// container: no line of its mountinfo is that file system (by device
// number), and no path the overlay's options name opens there.
func TestScratchUnreachable(t *testing.T) {
	r := newRunner(t)
	f := newScratchFixture(t, r)
	b, err := r.Create(f.spec(t, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	res := runHeld(t, b, `cat /proc/self/mountinfo; echo ---; ls -l /proc/self/fd/ /proc/1/fd/ 2>&1; echo ---;
for o in $(grep ' overlay ' /proc/self/mountinfo | tr ' ,' '\n\n' | sed -n 's/^\(lowerdir+*\|upperdir\|workdir\)=//p'); do
  ls -d "$o" 2>/dev/null && echo "OPENED $o"
done; echo done`)
	s := b.TakeScratch()
	defer s.Close()
	var st unix.Stat_t
	testutil.Must(t, unix.Fstat(int(s.Layers[0].Upper.Fd()), &st))
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	mi, rest, _ := strings.Cut(string(res.Stdout), "---")
	overlays := 0
	for _, line := range strings.Split(mi, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		if fields[2] == dev {
			t.Errorf("the scratch tmpfs (%s) is mounted in the container: %s", dev, line)
		}
		if strings.Contains(line, " overlay ") {
			overlays++
			t.Logf("overlay: %s", line)
		}
	}
	if overlays != 1 {
		t.Errorf("%d overlay mounts, want 1:\n%s", overlays, mi)
	}
	if strings.Contains(rest, "OPENED") || !strings.Contains(rest, "done") {
		t.Errorf("a layer the overlay names opens in the container:\n%s", rest)
	}
}

// TestScratchPooled: a pooled box's scratch layer works like a cold one.
func TestScratchPooled(t *testing.T) {
	r := newRunner(t)
	f := newScratchFixture(t, r)
	p := NewPool(r, f.spec(t, 1<<20), 1, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer p.Close()
	b := p.GetWait(context.Background(), time.Minute)
	if b == nil {
		t.Fatal("no pooled box")
	}
	defer b.Release()
	res := runHeld(t, b, `echo pooled > p.txt`)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	s := b.TakeScratch()
	defer s.Close()
	got, err := changeset.Read(s.Layers[0].Upper, 10)
	if err != nil || len(got) != 1 || got[0].Path != "p.txt" || got[0].SHA256 != sum("pooled\n") {
		t.Fatalf("changeset %+v %v", got, err)
	}
}

// TestScratchSpecChecked: Dests must be the spec's mounts.
func TestScratchSpecChecked(t *testing.T) {
	r := newRunner(t)
	f := newScratchFixture(t, r)
	s := f.spec(t, 1<<20)
	s.Scratch.Dests = []string{"/elsewhere"}
	if b, err := r.Create(s); err == nil {
		b.Release()
		t.Fatal("a scratch Dest that is no mount was accepted")
	}
}

// TestCache: a cache keeps what one box wrote for the next box given it,
// whatever uid each runs as; another cache is separate.
func TestCache(t *testing.T) {
	r := newRunner(t)
	requireCaches(t, r)
	c1, err := NewCache(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := NewCache(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	const dest = "/tmp/.cache/tool"
	run := func(c *Cache, script string) (*Box, *Result) {
		t.Helper()
		b, err := r.CreateWith(defaultSpec(t), CreateOptions{Caches: []CacheBind{{Dest: dest, Cache: c}, {Dest: "/var/cache/other", Cache: c2}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Release)
		return b, runHeld(t, b, script)
	}
	b1, res := run(c1, `set -e; cd `+dest+`; mkdir -p d; echo one > d/f; chmod 600 d/f; echo ok`)
	if !strings.Contains(string(res.Stdout), "ok") {
		t.Fatalf("first box: %s %s", res.Stdout, res.Stderr)
	}
	// b1 is held: b2 runs as another uid.
	b2, res := run(c1, `set -e; cd `+dest+`; cat d/f; echo two >> d/f; rm -rf d; echo three > g; id -u`)
	if b2.UID() == b1.UID() || !strings.HasPrefix(string(res.Stdout), "one\n") {
		t.Fatalf("second box (uid %d, first %d): %s %s", b2.UID(), b1.UID(), res.Stdout, res.Stderr)
	}
	b1.Release()
	b2.Release()
	b3, res := run(c1, `cat `+dest+`/g; ls -a `+dest)
	b3.Release()
	if string(res.Stdout) != "three\n.\n..\ng\n" {
		t.Fatalf("third box: %q %s", res.Stdout, res.Stderr)
	}
	b4, err := r.CreateWith(defaultSpec(t), CreateOptions{Caches: []CacheBind{{Dest: dest, Cache: c2}}})
	if err != nil {
		t.Fatal(err)
	}
	res = runHeld(t, b4, `ls -A `+dest+`; echo end`)
	b4.Release()
	if string(res.Stdout) != "end\n" {
		t.Fatalf("a second cache shows the first's files: %q", res.Stdout)
	}
}

func TestCacheDestChecked(t *testing.T) {
	r := newRunner(t)
	c, err := NewCache(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f := newFixture(t)
	for _, dest := range []string{"/usr/x", "/proc/x", "relative", "/tmp", "/a/../b", f.ws, f.ws + "/x", filepath.Dir(f.ws)} {
		b, err := r.CreateWith(f.spec(t), CreateOptions{Caches: []CacheBind{{Dest: dest, Cache: c}}})
		if err == nil {
			b.Release()
			t.Errorf("cache at %q accepted", dest)
		}
	}
}

// requireCaches skips, loudly, on a kernel that cannot bind a cache (an
// idmapped tmpfs needs Linux 6.3: Debian 12's 6.1 cannot).
func requireCaches(t *testing.T, r *Runner) {
	t.Helper()
	if err := r.CheckCaches(); err != nil {
		if errors.Is(err, unix.EINVAL) {
			t.Skipf("SKIP: THIS KERNEL CANNOT BIND CACHES (%v); the cache tests need Linux 6.3 or later", err)
		}
		t.Fatal(err)
	}
}
