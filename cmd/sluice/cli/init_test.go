package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/authz"
)

// TestInit: sluice init writes a manifest the loader accepts, says what to
// run next, and refuses, naming the fix, what it cannot do.
func TestInit(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	proj := filepath.Join(t.TempDir(), "calc")
	os.MkdirAll(proj, 0o755)
	os.WriteFile(filepath.Join(proj, "go.mod"), []byte("module calc\n"), 0o644)
	file := filepath.Join(t.TempDir(), "notadir")
	os.WriteFile(file, nil, 0o644)
	out := t.TempDir()

	// The default place, TOML.
	code, stdout, stderr := runCLI(t, "init", proj, "--agent", "1000")
	def := filepath.Join(cfg, "sluice", "calc.toml")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"Wrote " + def, "found go (go.mod): go test", "sluiced --check --manifest " + def,
		"/etc/sluice/manifest.toml", "systemctl reload sluiced", "ReadWritePaths=", "sluice client setup claude|codex|gemini|cursor|vscode", "sluice client check"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	data, err := os.ReadFile(def)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := authz.ParseFile(def, bytes.NewReader(data), filepath.Dir(def)); err != nil {
		t.Fatalf("the loader refuses it: %v", err)
	}
	// JSON by --format, or by --output's extension; explanations printed.
	for _, args := range [][]string{
		{"init", proj, "--format", "json", "--output", filepath.Join(out, "a.json")},
		{"init", "--output", filepath.Join(out, "b.json"), proj},
	} {
		code, stdout, stderr = runCLI(t, args...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		if !strings.Contains(stdout, "What each key means") || !strings.Contains(stdout, "tools.edit_file.approval: ") {
			t.Errorf("%v: no explanations:\n%s", args, stdout)
		}
	}
	data, _ = os.ReadFile(filepath.Join(out, "b.json"))
	if _, err := authz.ParseFile("b.json", bytes.NewReader(data), out); err != nil {
		t.Fatalf("the loader refuses the JSON: %v", err)
	}

	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"exists", []string{"init", proj, "--agent", "1000"}, ExitFailed, "already exists; use --force to replace it"},
		{"missing dir", []string{"init", filepath.Join(proj, "nope")}, ExitUsage, "does not exist; create it"},
		{"not a dir", []string{"init", file}, ExitUsage, "is not a directory"},
		{"format", []string{"init", proj, "--format", "yaml"}, ExitUsage, `--format "yaml": use toml`},
		{"ext", []string{"init", proj, "--format", "toml", "--output", filepath.Join(out, "c.json")}, ExitUsage, "name it " + filepath.Join(out, "c.toml")},
		{"inside", []string{"init", proj, "--output", filepath.Join(proj, "sluice.toml")}, ExitUsage, "lies inside " + proj},
		{"two dirs", []string{"init", proj, out}, ExitUsage, "one DIR at most"},
		{"agent", []string{"init", proj, "--agent", "no-such-user-xyz", "--output", filepath.Join(out, "d.toml")}, ExitUsage, "no such user"},
		{"group", []string{"init", proj, "--socket-group", "no-such-group-xyz", "--output", filepath.Join(out, "e.toml")}, ExitUsage, "sudo groupadd --system no-such-group-xyz"},
	} {
		code, _, stderr := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and %q", c.name, code, stderr, c.code, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(proj, "sluice.toml")); err == nil {
		t.Error("a manifest was written inside the project")
	}
	// Unchanged without --force, replaced with it.
	os.WriteFile(def, []byte("mine\n"), 0o644)
	runCLI(t, "init", proj)
	if b, _ := os.ReadFile(def); string(b) != "mine\n" {
		t.Fatalf("overwritten without --force: %q", b)
	}
	if code, _, stderr := runCLI(t, "init", proj, "--force", "--agent", "1000"); code != ExitOK {
		t.Fatalf("--force: exit %d: %s", code, stderr)
	}
	if b, _ := os.ReadFile(def); !bytes.HasPrefix(b, []byte("# A sluice manifest for "+proj)) {
		t.Fatalf("--force did not replace it: %q", b)
	}
	code, stdout, _ = runCLI(t, "init", "--help")
	if code != ExitOK || !strings.Contains(stdout, "--socket-group G") || !strings.Contains(stdout, "Never\n                      inside DIR") {
		t.Errorf("--help: %d\n%s", code, stdout)
	}
}
