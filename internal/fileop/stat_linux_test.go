package fileop

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
)

func TestStatInfo(t *testing.T) {
	for _, mode := range []securefs.Mode{securefs.ModeOpenat2, securefs.ModeFallback} {
		t.Run(mode.String(), func(t *testing.T) {
			f := newFixture(t, mode)
			put(t, filepath.Join(f.dir, "a"), "hello\n")
			if err := os.Chmod(filepath.Join(f.dir, "a"), 0o640); err != nil {
				t.Fatal(err)
			}
			when := time.Date(2024, 1, 2, 3, 4, 5, 6000, time.UTC)
			if err := os.Chtimes(filepath.Join(f.dir, "a"), when, when); err != nil {
				t.Fatal(err)
			}
			// A FIFO with no writer: opening it for reading would block
			// forever, so this test would hang if Stat opened it.
			if err := unix.Mkfifo(filepath.Join(f.dir, "fifo"), 0o600); err != nil {
				t.Fatal(err)
			}
			put(t, filepath.Join(f.dir, "huge"), "")
			if err := os.Truncate(filepath.Join(f.dir, "huge"), MaxHashBytes+1); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				path string
				kind string
				size int64
				perm uint32
				sum  string
			}{
				{"a", "file", 6, 0o640, digest("hello\n")},
				{"sub", "dir", -1, 0o755, ""},
				{"fifo", "fifo", 0, 0o600, ""},
				{"huge", "file", MaxHashBytes + 1, 0o644, ""},
			} {
				h, err := f.root.Resolve(c.path)
				if err != nil {
					t.Fatal(err)
				}
				var tee teeCount
				info, err := StatTee(context.Background(), h, &tee)
				h.Close()
				if err != nil || string(info.Kind) != c.kind || info.SHA256 != c.sum || (c.size >= 0 && info.Size != c.size) || info.Perm != c.perm {
					t.Errorf("Stat(%s) = %+v, %v; want %s size %d perm %o sum %q", c.path, info, err, c.kind, c.size, c.perm, c.sum)
				}
				// What the digest is of, and nothing of what has none
				// but the part of a file over the cap.
				if (c.sum != "" && (tee.head != "hello\n" || tee.n != 6)) || (c.kind != "file" && tee.n != 0) {
					t.Errorf("StatTee(%s) handed %d bytes %q", c.path, tee.n, tee.head)
				}
				if c.path == "a" && !info.ModTime.Equal(when) {
					t.Errorf("mtime %v, want %v", info.ModTime, when)
				}
			}
			h, err := f.root.Resolve("a")
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := Stat(ctx, h); !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled: %v", err)
			}
		})
	}
}

// teeCount counts what StatTee hands it and keeps its first 64 bytes.
type teeCount struct {
	n    int64
	head string
}

func (w *teeCount) Write(p []byte) (int, error) {
	if len(w.head) < 64 {
		w.head += string(p[:min(len(p), 64-len(w.head))])
	}
	w.n += int64(len(p))
	return len(p), nil
}
