package securefs

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/escapetest"
)

// BenchmarkResolveRead is the file side of one read_file call: resolve,
// locate (readlink), reopen through /proc, read, close.
func BenchmarkResolveRead(b *testing.B) {
	fx := escapetest.Build(b)
	root, err := OpenRoot(filepath.Join(fx.Base, "workspace/src"), ModeOpenat2)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	buf := make([]byte, 8192)
	b.Run("resolve", func(b *testing.B) {
		for b.Loop() {
			h, err := root.Resolve("sub/b.txt")
			if err != nil {
				b.Fatal(err)
			}
			h.Close()
		}
	})
	b.Run("resolve+locate", func(b *testing.B) {
		for b.Loop() {
			h, _ := root.Resolve("sub/b.txt")
			if _, _, err := root.Locate(h); err != nil {
				b.Fatal(err)
			}
			h.Close()
		}
	})
	b.Run("resolve+locate+open+read", func(b *testing.B) {
		for b.Loop() {
			h, _ := root.Resolve("sub/b.txt")
			root.Locate(h)
			f, err := h.Open()
			if err != nil {
				b.Fatal(err)
			}
			io.ReadFull(f, buf)
			f.Close()
			h.Close()
		}
	})
}
