//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// TestMain runs sluiced's main when the test binary is re-executed as
// sluiced (runSluiced).
func TestMain(m *testing.M) {
	if os.Getenv("SLUICED_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runSluiced(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SLUICED_TEST_MAIN=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

// TestVersionAndCheck: --version prints the version and exits 0;
// --check --manifest FILE validates without serving: exit 0 and one
// summary line, or the error and exit 1.
func TestVersionAndCheck(t *testing.T) {
	if code, out, errOut := runSluiced(t, "--version"); code != 0 || out != "sluiced "+api.BuildVersion()+"\n" {
		t.Fatalf("--version: exit %d, %q %q", code, out, errOut)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(good, []byte(`{"schema_version":1,"tools":{"read_file":{"operation":"read","roots":["src"]}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runSluiced(t, "--check", "--manifest", good, "--socket", filepath.Join(dir, "never.sock"))
	if code != 0 || !strings.HasPrefix(out, "ok: "+good+": 1 tools, 0 principals, policy_version sha256:") || strings.Count(out, "\n") != 1 {
		t.Fatalf("--check of a good manifest: exit %d, %q %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "never.sock")); !os.IsNotExist(err) {
		t.Fatalf("--check made its socket: %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"schema_version":1,"tools":{"read_file":{"operation":"read","roots":["src"],"max_bytes":"x"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runSluiced(t, "--check", "--manifest", bad); code != 1 || out != "" || !strings.HasPrefix(errOut, "sluiced: ") || !strings.Contains(errOut, "max_bytes") {
		t.Fatalf("--check of a bad manifest: exit %d, %q %q", code, out, errOut)
	}
	if code, _, _ := runSluiced(t, "--check"); code != 2 {
		t.Fatalf("--check without --manifest: exit %d, want 2 (usage)", code)
	}
}
