package testutil

import (
	"os"
	"sort"
	"testing"

	"golang.org/x/sys/unix"
)

// MountTmpfs mounts a tmpfs of size (as mount takes it: "64k", "16m") at
// dir, made if need be, until the test ends: a real file system that
// really fills up. It needs root.
func MountTmpfs(tb testing.TB, dir, size string) {
	tb.Helper()
	RequireRoot(tb)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+size+",mode=0755"); err != nil {
		tb.Fatalf("mount tmpfs: %v", err)
	}
	tb.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
}

// Listing returns the names in dir, sorted; it fails the test if dir
// cannot be read.
func Listing(tb testing.TB, dir string) []string {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}
