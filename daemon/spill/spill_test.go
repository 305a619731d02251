//go:build linux

package spill

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestSpillRoundTrip: a body reads back as it was put; one changed on
// disk while parked (same size or not) is refused, never handed to the
// approved call; Open removes what an earlier run left.
func TestSpillRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, Dir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, Dir, "old.body"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, n, err := Open(dir)
	if err != nil || n != 1 {
		t.Fatalf("Open: swept %d, %v", n, err)
	}
	defer s.Close()
	for _, bad := range []string{"", "a/b", ".x", "a\x00"} {
		if _, err := s.Put(bad, []byte("b")); err == nil {
			t.Errorf("Put(%q) accepted", bad)
		}
	}
	b, err := s.Put("id1", []byte("body one"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put("id1", []byte("again")); err == nil {
		t.Error("Put over an existing body accepted")
	}
	got, err := s.Get(b)
	if err != nil || string(got) != "body one" {
		t.Fatalf("Get: %q, %v", got, err)
	}
	p := filepath.Join(dir, Dir, "id1.body")
	for _, swap := range []string{"body two", "longer body"} {
		if err := os.WriteFile(p, []byte(swap), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(b); !errors.Is(err, ErrChanged) {
			t.Errorf("Get of a body changed to %q: %v, want ErrChanged", swap, err)
		}
	}
	s.Remove(b)
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Remove left %s: %v", p, err)
	}
}
