package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: a new file is written whole with its mode; an existing one is
// kept, and ErrExists returned, unless replace; no temporary file is left.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := Write(p, []byte("one"), 0o600, false); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("two"), 0o600, false); !errors.Is(err, ErrExists) {
		t.Fatalf("without replace: %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "one" {
		t.Fatalf("the existing file became %q", b)
	}
	if err := Write(p, []byte("three"), 0o640, true); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if b, _ := os.ReadFile(p); string(b) != "three" || err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("replaced: %q %v %v", b, st.Mode(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
}
