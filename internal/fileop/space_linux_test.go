package fileop

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/errclass"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

func TestParseReserve(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Reserve
		bad  bool
	}{
		{in: "0", want: Reserve{Off: true}},
		{in: "0%", want: Reserve{Off: true}},
		{in: "5%", want: Reserve{Percent: 5}},
		{in: "0.5%", want: Reserve{Percent: 0.5}},
		{in: "512M", want: Reserve{Bytes: 512 << 20}},
		{in: "2G", want: Reserve{Bytes: 2 << 30}},
		{in: "2GiB", want: Reserve{Bytes: 2 << 30}},
		{in: "1gb", want: Reserve{Bytes: 1 << 30}},
		{in: "4096", want: Reserve{Bytes: 4096}},
		{in: "10B", want: Reserve{Bytes: 10}},
		{in: "", bad: true}, {in: "-1", bad: true}, {in: "100%", bad: true}, {in: "x%", bad: true},
		{in: "5X", bad: true}, {in: "G", bad: true}, {in: "99999999999T", bad: true},
	} {
		got, err := ParseReserve(c.in)
		if (err != nil) != c.bad || (!c.bad && got != c.want) {
			t.Errorf("ParseReserve(%q) = %+v, %v", c.in, got, err)
		}
	}
	const total = 100 << 30
	if n := (Reserve{}).need(total); n != DefaultReserveBytes {
		t.Errorf("default on 100 GiB: %d, want 1 GiB", n)
	}
	if n := (Reserve{}).need(1 << 20); n != (1<<20)/100*5 {
		t.Errorf("default on 1 MiB: %d, want 5%%", n)
	}
	if n := (Reserve{Off: true}).need(total); n != 0 {
		t.Errorf("off: %d", n)
	}
}

func tmpfsRoot(t *testing.T, size string) (string, *securefs.Root) {
	dir := filepath.Join(t.TempDir(), "fs")
	testutil.MountTmpfs(t, dir, size)
	root, err := securefs.OpenRoot(dir, securefs.ModeAuto)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return dir, root
}

func parentIn(t *testing.T, root *securefs.Root, name string) *Parent {
	t.Helper()
	p, err := ResolveParent(root, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestWriteENOSPC: a write that really runs out of space (no reserve)
// is ENOSPC, classified no_space, and leaves the old content and no
// temporary file, with O_TMPFILE and with a named temp.
func TestWriteENOSPC(t *testing.T) {
	for _, named := range []bool{false, true} {
		dir, root := tmpfsRoot(t, "1M")
		put(t, filepath.Join(dir, "f"), "old\n")
		big := make([]byte, 2<<20)
		_, err := Write(parentIn(t, root, "f"), big, WriteOptions{Mode: CreateOrOverwrite, UID: -1, GID: -1, MinFree: Reserve{Off: true}, noTmpfile: named})
		if !errclass.NoSpace(err) || reasonOf(err) != api.ReasonNoSpace {
			t.Fatalf("named=%v: %v, want ENOSPC", named, err)
		}
		if got := get(t, filepath.Join(dir, "f")); got != "old\n" {
			t.Errorf("named=%v: old content now %q", named, got)
		}
		noTemps(t, dir)
	}
}

// TestWriteReserve: a write that would leave less than the reserve is
// refused before a temp exists; one that leaves enough goes through.
func TestWriteReserve(t *testing.T) {
	dir, root := tmpfsRoot(t, "1M")
	put(t, filepath.Join(dir, "f"), "old\n")
	made := 0
	opts := WriteOptions{Mode: CreateOrOverwrite, UID: -1, GID: -1, MinFree: Reserve{Bytes: 512 << 10},
		OnTemp: func(*Parent, string) error { made++; return nil }}
	_, err := Write(parentIn(t, root, "f"), make([]byte, 600<<10), opts)
	var nse *NoSpaceError
	if !errors.As(err, &nse) || reasonOf(err) != api.ReasonNoSpace || made != 0 {
		t.Fatalf("%v (temps made: %d), want a *NoSpaceError before any temp", err, made)
	}
	if got := get(t, filepath.Join(dir, "f")); got != "old\n" {
		t.Errorf("old content now %q", got)
	}
	if _, err := Write(parentIn(t, root, "f"), make([]byte, 100<<10), opts); err != nil {
		t.Fatalf("a write that leaves the reserve: %v", err)
	}
	noTemps(t, dir)
}

// failSyncDir makes the directory fsync fail with EIO until the test ends.
func failSyncDir(t *testing.T) {
	TestHookSyncDir = func(int) error { return unix.EIO }
	t.Cleanup(func() { TestHookSyncDir = nil })
}

// TestNotDurable: an EIO from the directory fsync after the commit is
// ErrNotDurable (the EIO survives) with the committed result, for a write
// and a delete; the change happened.
func TestNotDurable(t *testing.T) {
	f := newFixture(t, securefs.ModeAuto)
	put(t, filepath.Join(f.dir, "f"), "old\n")
	failSyncDir(t)
	res, err := Write(f.parent(t, "f"), []byte("new\n"), WriteOptions{Mode: CreateOrOverwrite, UID: -1, GID: -1})
	if !errors.Is(err, ErrNotDurable) || !errors.Is(err, unix.EIO) || res.SHA256 != digest("new\n") || res.Bytes != 4 {
		t.Fatalf("write: %+v %v", res, err)
	}
	if got := get(t, filepath.Join(f.dir, "f")); got != "new\n" {
		t.Fatalf("content %q", got)
	}
	dres, err := Delete(f.parent(t, "f"), nil)
	if !errors.Is(err, ErrNotDurable) || !errors.Is(err, unix.EIO) || dres.SHA256 != digest("new\n") || dres.Size != 4 {
		t.Fatalf("delete: %+v %v", dres, err)
	}
	if _, err := os.Lstat(filepath.Join(f.dir, "f")); !os.IsNotExist(err) {
		t.Fatalf("deleted file still there: %v", err)
	}
}

// TestHashCap: if_match over a file above MaxHashBytes (a sparse 1 TiB
// file, which costs no disk) fails the precondition without reading it;
// a delete of it records the size and no digest.
func TestHashCap(t *testing.T) {
	f := newFixture(t, securefs.ModeAuto)
	p := filepath.Join(f.dir, "huge")
	put(t, p, "")
	if err := os.Truncate(p, 1<<40); err != nil {
		t.Fatal(err)
	}
	cur, err := f.parent(t, "huge").Stat()
	if err != nil {
		t.Fatal(err)
	}
	err = MatchIfMatch(digest(""), cur)
	if !errors.Is(err, ErrPrecondition) || !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "cap") {
		t.Fatalf("if_match over the cap: %v", err)
	}
	res, err := Delete(f.parent(t, "huge"), nil)
	if err != nil || res.SHA256 != "" || res.Size != 1<<40 {
		t.Fatalf("delete over the cap: %+v %v", res, err)
	}
}

// TestHashCancel: hashing stops when its context ends.
func TestHashCancel(t *testing.T) {
	f := newFixture(t, securefs.ModeAuto)
	p := filepath.Join(f.dir, "big")
	put(t, p, "")
	if err := os.Truncate(p, MaxHashBytes); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cur, err := f.parent(t, "big").Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := MatchIfMatchContext(ctx, digest(""), cur); !errors.Is(err, context.Canceled) || errors.Is(err, ErrPrecondition) {
		t.Fatalf("if_match under a cancelled context: %v", err)
	}
	if _, err := DeleteContext(ctx, f.parent(t, "big"), nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("delete under a cancelled context: %v", err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("a cancelled delete removed the file: %v", err)
	}
	// Mid-hash: a reader that cancels after the first chunk.
	ctx, cancel = context.WithCancel(context.Background())
	r := &cancelAfter{n: hashChunk, cancel: cancel}
	if _, _, err := hashBounded(ctx, r, MaxHashBytes); !errors.Is(err, context.Canceled) || r.read > 2*hashChunk {
		t.Fatalf("mid-hash cancel: %v after %d bytes", err, r.read)
	}
}

type cancelAfter struct {
	n, read int
	cancel  func()
}

func (r *cancelAfter) Read(b []byte) (int, error) {
	r.read += len(b)
	if r.read >= r.n {
		r.cancel()
	}
	return len(b), nil
}
