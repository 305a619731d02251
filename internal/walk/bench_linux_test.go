//go:build linux

package walk

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// benchTree is a source-like tree of n files of 1–20 KiB in directories
// up to eight deep, the needle in one file of 200. SLUICE_BENCH_TREE
// names an existing tree to use instead (bench/search.sh makes one of
// 10,000 files).
func benchTree(b *testing.B, n int) string {
	if dir := os.Getenv("SLUICE_BENCH_TREE"); dir != "" {
		return dir
	}
	dir := b.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	dirs := []string{dir}
	for i := range n / 10 {
		p := dirs[rng.IntN(len(dirs))]
		if strings.Count(p[len(dir):], "/") >= 8 {
			p = dir
		}
		p = filepath.Join(p, fmt.Sprintf("pkg%d", i))
		testutil.Must(b, os.Mkdir(p, 0o755))
		dirs = append(dirs, p)
	}
	line := "\tif err := store.Put(ctx, key, value); err != nil { return fmt.Errorf(\"put: %w\", err) }\n"
	for i := range n {
		var sb strings.Builder
		size := 1024 + rng.IntN(19*1024)
		for sb.Len() < size {
			sb.WriteString(line)
			if rng.IntN(200*size/len(line)) == 0 {
				sb.WriteString("\tconst marker = \"" + needle + "\"\n")
			}
		}
		testutil.Must(b, os.WriteFile(filepath.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("f%d.go", i)), []byte(sb.String()), 0o644))
	}
	return dir
}

// benchOpen opens dir as openDir does, closed when done is called.
func benchOpen(b *testing.B, dir string) (*os.File, func()) {
	r, err := securefs.OpenRoot(dir, securefs.ModeOpenat2)
	testutil.Must(b, err)
	h, err := r.Resolve(".")
	testutil.Must(b, err)
	return h.File(), func() { h.Close(); r.Close() }
}

// BenchmarkSearch: names, a rare literal and a common regex over the
// whole tree (caps raised), and a tree listing.
func BenchmarkSearch(b *testing.B) {
	dir := benchTree(b, 2000)
	big := Options{Skip: never, MaxBytes: 1 << 30, MaxResults: 1 << 30}
	for _, c := range []struct {
		name string
		q    Query
	}{
		{"names", Query{Name: mustGlob("*.go")}},
		{"rare", Query{Content: regexp.MustCompile(needle)}},
		{"common", Query{Content: regexp.MustCompile(`err != nil`)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				f, done := benchOpen(b, dir)
				if _, err := Search(context.Background(), f, c.q, big); err != nil {
					b.Fatal(err)
				}
				done()
			}
		})
	}
	b.Run("tree", func(b *testing.B) {
		for b.Loop() {
			f, done := benchOpen(b, dir)
			if _, err := Tree(context.Background(), f, 64, true, big); err != nil {
				b.Fatal(err)
			}
			done()
		}
	})
}
