package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClientSetupDryRun: --dry-run prints the diff of what setup would
// write and writes nothing; without it the files are written and a
// second run leaves them unchanged.
func TestClientSetupDryRun(t *testing.T) {
	home, proj := t.TempDir(), t.TempDir()
	t.Setenv("HOME", home)
	sock := filepath.Join(t.TempDir(), "s.sock") // nothing listens: setup says so
	args := []string{"--socket", sock, "client", "setup", "claude", "--dir", proj}
	var out, errb bytes.Buffer
	if code := run(context.Background(), append(args, "--dry-run"), &out, &errb); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), filepath.Join(home, ".claude.json")) || !strings.Contains(out.String(), `"--socket",`) ||
		!strings.Contains(out.String(), "nothing written") {
		t.Errorf("dry run printed:\n%s", out.String())
	}
	if ents, _ := os.ReadDir(home); len(ents) != 0 {
		t.Fatalf("--dry-run wrote %v", ents)
	}
	out.Reset()
	if code := run(context.Background(), args, &out, &errb); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"wrote " + filepath.Join(home, ".claude", "settings.json"), "WebSearch", "there is no socket at " + sock} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("setup printed no %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	run(context.Background(), args, &out, &errb)
	if strings.Contains(out.String(), "wrote ") {
		t.Errorf("the second setup wrote again:\n%s", out.String())
	}
}

// TestClientCheckNoConfig: check of a client not set up names the fix.
func TestClientCheckNoConfig(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"client", "check", "gemini"}, &out, &errb)
	if code != ExitFailed || !strings.Contains(errb.String(), "sluice client setup gemini") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}
