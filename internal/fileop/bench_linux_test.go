package fileop

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/securefs"
)

// BenchmarkWrite is the file side of one write call (resolve the parent,
// take the lock, write, commit, close) next to its floor: the same
// durability done plainly by path (write a temp file, fsync, rename, fsync
// the directory), with nothing resolved beneath a root.
func BenchmarkWrite(b *testing.B) {
	content := bytes.Repeat([]byte("x"), 4096)
	var locks Locks
	ways := []struct {
		name      string
		noTmpfile bool
		floor     bool
	}{{"fileop-tmpfile", false, false}, {"fileop-named", true, false}, {"floor", false, true}}
	// Side by side per case, so that the disk's drift hits all three alike.
	b.Run("new", func(b *testing.B) {
		for _, w := range ways {
			b.Run(w.name, func(b *testing.B) {
				f := newFixture(b, securefs.ModeOpenat2)
				i := 0
				for b.Loop() {
					i++
					name := "n" + strconv.Itoa(i)
					if w.floor {
						floorWrite(b, f.dir, name, content)
					} else {
						fileopWrite(b, f, &locks, name, content, Create, w.noTmpfile)
					}
				}
			})
		}
	})
	b.Run("overwrite-4KiB", func(b *testing.B) {
		for _, w := range ways {
			b.Run(w.name, func(b *testing.B) {
				f := newFixture(b, securefs.ModeOpenat2)
				put(b, filepath.Join(f.dir, "f"), string(content))
				for b.Loop() {
					if w.floor {
						floorWrite(b, f.dir, "f", content)
					} else {
						fileopWrite(b, f, &locks, "f", content, Overwrite, w.noTmpfile)
					}
				}
			})
		}
	})
}

func fileopWrite(b *testing.B, f *fixture, locks *Locks, name string, content []byte, mode WriteMode, noTmpfile bool) {
	p, err := ResolveParent(f.root, name)
	if err != nil {
		b.Fatal(err)
	}
	unlock := locks.Lock(p)
	_, err = Write(p, content, WriteOptions{Mode: mode, noTmpfile: noTmpfile})
	unlock()
	p.Close()
	if err != nil {
		b.Fatal(err)
	}
}

func floorWrite(b *testing.B, dir, name string, content []byte) {
	tmp := filepath.Join(dir, ".tmp-"+name)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.Write(content); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		b.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		b.Fatal(err)
	}
	d.Close()
}
