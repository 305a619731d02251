package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestTokenFileRefused: `sluice mcp --token-file` and `sluice call
// --token-file` refuse a token file other users may read, before they
// reach the socket, naming the fix.
func TestTokenFileRefused(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no mode bits on Windows")
	}
	f := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(f, []byte("slt_ab_cd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{{"mcp", "--token-file", f}, {"call", "read_file", "--token-file", f}} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"--socket", sock}, args...), &stdout, &stderr)
		if code != ExitUsage || !strings.Contains(stderr.String(), "chmod 600") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}
