package fileop

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/securefs"
)

// TestReadRangeHeldFd: how the read tool uses ReadRange: on the file
// re-opened from the resolved handle, with the handle's fstat size.
func TestReadRangeHeldFd(t *testing.T) {
	f := newFixture(t, securefs.ModeOpenat2)
	var b strings.Builder
	for i := range 1000 {
		b.WriteString(strings.Repeat("y", i%50) + "\n")
	}
	put(t, filepath.Join(f.dir, "sub", "big.txt"), b.String())
	h, err := f.root.Resolve("sub/big.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	rf, err := h.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	got, err := ReadRange(context.Background(), rf, h.Stat.Size, Range{Offset: 51, Limit: 2, MaxBytes: 1 << 20})
	if err != nil || string(got.Data) != "\ny\n" || got.FirstLine != 51 || got.NextOffset != 53 || got.Size != int64(b.Len()) {
		t.Fatalf("ReadRange = %+v %q, %v", got, got.Data, err)
	}
	got, err = ReadRange(context.Background(), rf, h.Stat.Size, Range{Tail: 1, MaxBytes: 1 << 20})
	if err != nil || string(got.Data) != strings.Repeat("y", 49)+"\n" {
		t.Fatalf("tail = %+v %q, %v", got, got.Data, err)
	}
}
