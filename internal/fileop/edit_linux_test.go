package fileop

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/securefs"
)

// TestEditCommit shows how an edit commits: read through the Parent,
// apply the edits, Write with if_match = the digest of what was read. A
// change between the read and the write (by anyone: here an in-place
// rewrite outside the daemon) fails the precondition and leaves the
// other writer's content.
func TestEditCommit(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			for _, race := range []bool{false, true} {
				f := newFixture(t, v.mode)
				target := filepath.Join(f.dir, "sub", "e.txt")
				put(t, target, "one\ntwo\nthree\n")
				p := f.parent(t, "sub/e.txt")
				old, sum, err := p.ReadAll(context.Background(), MaxHashBytes)
				if err != nil || sum != digest("one\ntwo\nthree\n") {
					t.Fatalf("ReadAll = %q, %s, %v", old, sum, err)
				}
				edited, err := ApplyEdits(old, []Edit{{"two\n", "TWO\n"}})
				if err != nil {
					t.Fatal(err)
				}
				if race {
					put(t, target, "someone else\n")
				}
				var locks Locks
				unlock := locks.Lock(p)
				res, err := Write(p, edited, WriteOptions{
					Mode:      Overwrite,
					noTmpfile: v.noTmpfile,
					Check:     func(c Current) error { return MatchIfMatch(sum, c) },
				})
				unlock()
				if race {
					if !errors.Is(err, ErrPrecondition) {
						t.Fatalf("write after a concurrent change: %v, want ErrPrecondition", err)
					}
					if got := get(t, target); got != "someone else\n" {
						t.Fatalf("the other writer's content was overwritten: %q", got)
					}
				} else {
					if err != nil || res.SHA256 != digest("one\nTWO\nthree\n") {
						t.Fatalf("write = %+v, %v", res, err)
					}
					if got := get(t, target); got != "one\nTWO\nthree\n" {
						t.Fatalf("content = %q", got)
					}
				}
				noTemps(t, filepath.Join(f.dir, "sub"))
			}
		})
	}
}

// TestReadAll: only a regular file is read, never through a final
// symlink, and at most limit bytes.
func TestReadAll(t *testing.T) {
	f := newFixture(t, securefs.ModeOpenat2)
	put(t, filepath.Join(f.dir, "big"), strings.Repeat("x", 100))
	if err := os.Symlink(filepath.Join(f.out, "secret"), filepath.Join(f.dir, "ln")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(f.dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		limit int64
		want  error
	}{
		{"big", 100, nil},
		{"big", 99, ErrTooLarge},
		{"ln", 1 << 20, ErrNotRegular},
		{"d", 1 << 20, ErrIsDir},
		{"missing", 1 << 20, securefs.ErrNotExist},
	} {
		b, _, err := f.parent(t, c.name).ReadAll(ctx, c.limit)
		if !errors.Is(err, c.want) || (err == nil && len(b) != 100) {
			t.Errorf("ReadAll(%s, %d) = %d bytes, %v; want %v", c.name, c.limit, len(b), err, c.want)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := f.parent(t, "big").ReadAll(cctx, 100); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadAll with a cancelled context: %v", err)
	}
	f.outsideUntouched(t)
}
