package client

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestReadTokenFile: a token file others may read or write is refused
// with the fix; one line is trimmed of its newline; garbage is refused.
func TestReadTokenFile(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no mode bits on Windows")
	}
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if tok, err := ReadTokenFile(write("ok", "slt_ab_cd\n", 0o600)); err != nil || tok != "slt_ab_cd" {
		t.Fatalf("%q %v", tok, err)
	}
	for name, mode := range map[string]os.FileMode{"world": 0o644, "other-write": 0o602, "all": 0o666} {
		if _, err := ReadTokenFile(write(name, "slt_ab_cd\n", mode)); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("%s (%o): %v", name, mode, err)
		}
	}
	for name, body := range map[string]string{"empty": "\n", "two": "a\nb\n", "space": "a b"} {
		if _, err := ReadTokenFile(write(name, body, 0o600)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
