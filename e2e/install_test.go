//go:build linux

package e2e

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/testutil"
)

// install runs scripts/install.sh with DESTDIR=dest and returns its output.
func install(t *testing.T, dest string, args ...string) string {
	t.Helper()
	cmd := exec.Command("../scripts/install.sh", append([]string{"--bin", binDir}, args...)...)
	cmd.Env = append(os.Environ(), "DESTDIR="+dest)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// tree lists every file and directory under root with its mode.
func tree(t *testing.T, root string) map[string]fs.FileMode {
	t.Helper()
	out := map[string]fs.FileMode{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[strings.TrimPrefix(p, root)] = fi.Mode()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func describe(m map[string]fs.FileMode) string {
	var lines []string
	for p, mode := range m {
		lines = append(lines, mode.String()+" "+p)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestInstallScript installs into a scratch root (DESTDIR) and checks the
// file list and modes, that a second run changes nothing and keeps an
// edited manifest, that --prefix moves the binaries and the units' paths
// with them, and that --uninstall removes binaries and units but keeps
// the manifest and the state dir.
func TestInstallScript(t *testing.T) {
	dest := t.TempDir()
	out := install(t, dest)
	want := map[string]fs.FileMode{
		"/usr":                                     fs.ModeDir | 0o755,
		"/usr/local":                               fs.ModeDir | 0o755,
		"/usr/local/bin":                           fs.ModeDir | 0o755,
		"/usr/local/bin/sluiced":                   0o755,
		"/usr/local/bin/sluice":                    0o755,
		"/usr/local/bin/sluice-helper":             0o755,
		"/usr/local/bin/sluice-init":               0o755,
		"/usr/local/share":                         fs.ModeDir | 0o755,
		"/usr/local/share/doc":                     fs.ModeDir | 0o755,
		"/usr/local/share/doc/sluice":              fs.ModeDir | 0o755,
		"/usr/local/share/doc/sluice/README.md":    0o644,
		"/etc":                                     fs.ModeDir | 0o755,
		"/etc/systemd":                             fs.ModeDir | 0o755,
		"/etc/systemd/system":                      fs.ModeDir | 0o755,
		"/etc/systemd/system/sluiced.service":      0o644,
		"/etc/systemd/system/sluiced.socket":       0o644,
		"/etc/tmpfiles.d":                          fs.ModeDir | 0o755,
		"/etc/tmpfiles.d/sluice.conf":              0o644,
		"/etc/sluice":                              fs.ModeDir | 0o750,
		"/etc/sluice/manifest.json":                0o640,
		"/var":                                     fs.ModeDir | 0o755,
		"/var/lib":                                 fs.ModeDir | 0o755,
		"/var/lib/sluice":                          fs.ModeDir | 0o700,
		"/srv":                                     fs.ModeDir | 0o755,
		"/srv/sluice":                              fs.ModeDir | 0o755,
		"/srv/sluice/workspace":                    fs.ModeDir | 0o755,
		"/srv/sluice/workspace/src":                fs.ModeDir | 0o755,
		"/srv/sluice/workspace/src/calc.py":        0o644,
		"/srv/sluice/workspace/tests":              fs.ModeDir | 0o755,
		"/srv/sluice/workspace/tests/test_calc.py": 0o644,
	}
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	want["/usr/local/share/doc/sluice/docs"] = fs.ModeDir | 0o755
	for _, d := range docs {
		want["/usr/local/share/doc/sluice/docs/"+filepath.Base(d)] = 0o644
	}
	got := tree(t, dest)
	if describe(got) != describe(want) {
		t.Fatalf("installed tree:\n%s\n\nwant:\n%s\n\noutput:\n%s", describe(got), describe(want), out)
	}
	for _, b := range []string{"sluiced", "sluice", "sluice-init", "sluice-helper"} {
		a, err := os.ReadFile(filepath.Join(binDir, b))
		testutil.Must(t, err)
		i, err := os.ReadFile(filepath.Join(dest, "usr/local/bin", b))
		testutil.Must(t, err)
		if !bytes.Equal(a, i) {
			t.Errorf("installed %s differs from %s", b, filepath.Join(binDir, b))
		}
	}
	unit, err := os.ReadFile(filepath.Join(dest, "etc/systemd/system/sluiced.service"))
	testutil.Must(t, err)
	if !bytes.Contains(unit, []byte("\nExecStart=/usr/local/bin/sluiced --manifest /etc/sluice/manifest.json")) {
		t.Errorf("installed unit's ExecStart:\n%s", unit)
	}
	if !strings.Contains(out, "systemctl enable --now sluiced.socket") || !strings.Contains(out, "skipped group sluice (DESTDIR)") {
		t.Errorf("output does not say what was skipped and what to do next:\n%s", out)
	}
	// The example manifest is valid and its base is the installed workspace.
	mf, err := os.Open(filepath.Join(dest, "etc/sluice/manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := authz.Parse(mf, "/etc/sluice")
	mf.Close()
	if err != nil {
		t.Fatalf("installed example manifest: %v", err)
	}
	if m.BaseDir != "/srv/sluice" {
		t.Errorf("example manifest base %q, want /srv/sluice", m.BaseDir)
	}

	// Idempotent, and an edited manifest is kept.
	edited := []byte(`{"schema_version":1,"tools":{}}` + "\n")
	if err := os.WriteFile(filepath.Join(dest, "etc/sluice/manifest.json"), edited, 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Must(t, os.Chmod(filepath.Join(dest, "etc/sluice/manifest.json"), 0o600)) // the admin's mode is kept too
	out = install(t, dest)
	want["/etc/sluice/manifest.json"] = 0o600
	if again := tree(t, dest); describe(again) != describe(want) {
		t.Fatalf("second run changed the tree:\n%s\n\noutput:\n%s", describe(again), out)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "etc/sluice/manifest.json")); !bytes.Equal(b, edited) {
		t.Fatal("a second run overwrote the manifest")
	}
	if strings.Contains(out, "install: installed ") || strings.Contains(out, "install: updated ") ||
		!strings.Contains(out, "kept /etc/sluice/manifest.json") {
		t.Errorf("second run did not report everything unchanged:\n%s", out)
	}
	// A world-readable manifest (it names uids and paths) loses the bits
	// for others, and keeps the rest of the admin's mode.
	if err := os.Chmod(filepath.Join(dest, "etc/sluice/manifest.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	install(t, dest)
	if fi, err := os.Stat(filepath.Join(dest, "etc/sluice/manifest.json")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("a 0644 manifest after install: %v %v, want 0640", fi.Mode(), err)
	}

	// --prefix moves the binaries and the units' paths.
	pdest := t.TempDir()
	install(t, pdest, "--prefix", "/opt/sluice")
	if _, err := os.Stat(filepath.Join(pdest, "opt/sluice/bin/sluiced")); err != nil {
		t.Error(err)
	}
	unit, err = os.ReadFile(filepath.Join(pdest, "etc/systemd/system/sluiced.service"))
	testutil.Must(t, err)
	if !bytes.Contains(unit, []byte("\nExecStart=/opt/sluice/bin/sluiced ")) || bytes.Contains(unit, []byte("/usr/local/")) {
		t.Errorf("--prefix unit:\n%s", unit)
	}

	// --uninstall removes binaries and units, keeps manifest and state.
	out = install(t, dest, "--uninstall")
	left := tree(t, dest)
	for p := range left {
		if strings.HasPrefix(p, "/usr/local/bin/") || strings.HasPrefix(p, "/etc/systemd/system/") ||
			strings.HasPrefix(p, "/usr/local/share/doc/sluice") || p == "/etc/tmpfiles.d/sluice.conf" {
			t.Errorf("--uninstall left %s", p)
		}
	}
	for _, keep := range []string{"/etc/sluice/manifest.json", "/var/lib/sluice", "/srv/sluice/workspace/src/calc.py"} {
		if _, ok := left[keep]; !ok {
			t.Errorf("--uninstall removed %s", keep)
		}
	}
	if !strings.Contains(out, "kept /etc/sluice") || !strings.Contains(out, "/var/lib/sluice") {
		t.Errorf("--uninstall does not say what it kept:\n%s", out)
	}
}
