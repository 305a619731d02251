//go:build linux

package daemon

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/profiles"
)

// TestPolicyOutOfWriteRoots: a manifest, or a seccomp profile it names,
// that a write or delete tool's root can reach is refused at load — the
// agent could replace it and the next reload would load its policy
// (docs/security.md, "The third review"). Reachable is decided by device
// and inode: the file's directory or an ancestor, reached directly,
// through a symlinked root, through a symlink on the manifest's path, or
// through a bind mount either way. Read and list roots may hold it.
//
// Layout under base: etc/sluice/ holds the manifest unless a row says
// otherwise; workspace/ is the agent's.
func TestPolicyOutOfWriteRoots(t *testing.T) {
	testutil.RequireRoot(t)
	seccompJSON := profiles.DefaultSeccomp
	for _, c := range []struct {
		name string
		// setup arranges base and returns the manifest's path.
		setup func(t *testing.T, base string) string
		tools string // the manifest's tools
		want  string // "" loads; else the error holds it
	}{
		{"write root holds the manifest's directory",
			inDir("workspace/policy"), `"w":{"operation":"write","roots":["workspace/policy"]}`,
			`tools.w.roots[0]: "workspace/policy" (`},
		{"write root is an ancestor",
			inDir("etc/sluice"), `"w":{"operation":"write","roots":["etc"]}`,
			`tools.w.roots[0]: "etc" (`},
		{"write root is base, the manifest's own directory",
			inDir(""), `"w":{"operation":"write","roots":["."]}`,
			`tools.w.roots[0]: "." (`},
		{"delete root holds it",
			inDir("workspace/policy"), `"rm":{"operation":"delete","roots":["workspace"]}`,
			`tools.rm.roots[0]: "workspace" (`},
		{"write root through a symlink",
			func(t *testing.T, base string) string {
				testutil.Must(t, os.Symlink("../etc", filepath.Join(base, "workspace/etc_link")))
				return inDir("etc/sluice")(t, base)
			}, `"w":{"operation":"write","roots":["workspace/src","workspace/etc_link"]}`,
			`tools.w.roots[1]: "workspace/etc_link" (`},
		{"a symlink on the manifest's path lies in a write root",
			func(t *testing.T, base string) string {
				m := inDir("etc/sluice")(t, base)
				link := filepath.Join(base, "workspace/manifest.json")
				testutil.Must(t, os.Symlink(m, link))
				return link
			}, `"w":{"operation":"write","roots":["workspace"]}`,
			`tools.w.roots[0]: "workspace" (`},
		{"the manifest's path leads into a write root",
			func(t *testing.T, base string) string {
				inDir("workspace/policy")(t, base)
				link := filepath.Join(base, "etc/manifest.json")
				testutil.Must(t, os.Symlink("../workspace/policy/manifest.json", link))
				return link
			}, `"w":{"operation":"write","roots":["workspace/policy"]}`,
			`tools.w.roots[0]: "workspace/policy" (`},
		{"a bind mount of the manifest's directory is a write root",
			func(t *testing.T, base string) string {
				m := inDir("etc/sluice")(t, base)
				bindMount(t, filepath.Join(base, "etc/sluice"), filepath.Join(base, "workspace/bound"))
				return m
			}, `"w":{"operation":"write","roots":["workspace/bound"]}`,
			`tools.w.roots[0]: "workspace/bound" (`},
		{"the manifest's directory is bound into a write root",
			func(t *testing.T, base string) string {
				bindMount(t, filepath.Join(base, "etc/sluice"), filepath.Join(base, "workspace/bound"))
				return inDir("etc/sluice")(t, base)
			}, `"w":{"operation":"write","roots":["workspace"]}`,
			`tools.w.roots[0]: "workspace" (`},
		{"the manifest is reached through a bind mount of a write root's directory",
			func(t *testing.T, base string) string {
				bindMount(t, filepath.Join(base, "workspace/policy"), filepath.Join(base, "etc/sluice"))
				return inDir("etc/sluice")(t, base)
			}, `"w":{"operation":"write","roots":["workspace"]}`,
			`tools.w.roots[0]: "workspace" (`},
		{"the seccomp profile lies in a write root",
			func(t *testing.T, base string) string {
				testutil.Must(t, os.WriteFile(filepath.Join(base, "workspace/src/seccomp.json"), seccompJSON, 0o644))
				return inDir("")(t, base)
			}, `"w":{"operation":"write","roots":["workspace/src"]},
			    "x":{"operation":"execute","commands":[["true"]],"seccomp":"workspace/src/seccomp.json"}`,
			`tools.w.roots[0]: "workspace/src" (`},
		{"read and list roots may hold it",
			inDir("workspace/policy"), `"r":{"operation":"read","roots":["workspace","."]},"l":{"operation":"list","roots":["workspace/policy"]}`,
			""},
		{"a write root beside it, or beneath its directory",
			inDir(""), `"w":{"operation":"write","roots":["workspace/src"]},"rm":{"operation":"delete","roots":["workspace"]}`,
			""},
		{"a seccomp profile outside write roots",
			func(t *testing.T, base string) string {
				testutil.Must(t, os.WriteFile(filepath.Join(base, "etc/seccomp.json"), seccompJSON, 0o644))
				return inDir("")(t, base)
			}, `"w":{"operation":"write","roots":["workspace/src"]},
			    "x":{"operation":"execute","commands":[["true"]],"seccomp":"etc/seccomp.json"}`,
			"no sandbox is available"}, // the load went past the check
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			for _, d := range []string{"workspace/src", "workspace/policy", "workspace/bound", "etc/sluice"} {
				testutil.Must(t, os.MkdirAll(filepath.Join(base, d), 0o755))
			}
			m := c.setup(t, base)
			body := `{"schema_version":1,"base":"` + base + `","tools":{` + c.tools + `}}`
			testutil.Must(t, os.WriteFile(m, []byte(body), 0o644))
			p, err := loadPolicy(m, securefs.ModeAuto, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err == nil {
				p.close()
			}
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want == "":
			case err == nil || !strings.Contains(err.Error(), c.want):
				t.Fatalf("%v, want an error with %q", err, c.want)
			case c.want != "no sandbox is available" && !strings.Contains(err.Error(), "could rewrite the policy"):
				t.Fatalf("%v: does not say why", err)
			}
		})
	}
}

// inDir writes no file; it returns a setup placing the manifest in dir
// (relative to base).
func inDir(dir string) func(t *testing.T, base string) string {
	return func(t *testing.T, base string) string {
		return filepath.Join(base, dir, "manifest.json")
	}
}

// bindMount binds src onto dst until the test ends.
func bindMount(t *testing.T, src, dst string) {
	t.Helper()
	testutil.Must(t, unix.Mount(src, dst, "", unix.MS_BIND, ""))
	t.Cleanup(func() {
		if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dst, err)
		}
	})
}

// TestReloadKeepsPolicyOutOfWriteRoots: over the socket, a reload to a
// manifest that gives a write tool a root holding the manifest is refused
// naming the tool, the root and the file, and the policy in force stays;
// a daemon does not start on one.
func TestReloadKeepsPolicyOutOfWriteRoots(t *testing.T) {
	base := t.TempDir()
	testutil.Must(t, os.MkdirAll(filepath.Join(base, "workspace"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(base, "workspace/a.txt"), []byte("a\n"), 0o644))
	m := filepath.Join(base, "workspace/manifest.json")
	const read = `"read_file":{"operation":"read","roots":["workspace"]}`
	head := `{"schema_version":1,"base":"` + base + `","tools":{`
	bad := head + read + `,"write_file":{"operation":"write","roots":["workspace"]}}}`
	testutil.Must(t, os.WriteFile(m, []byte(bad), 0o644))
	if err := runRefused(t, m); err == nil || !strings.Contains(err.Error(), "manifest: tools.write_file.roots[0]") {
		t.Fatalf("sluiced on a manifest inside a write root: %v, want refused", err)
	}
	testutil.Must(t, os.WriteFile(m, []byte(head+read+`}}`), 0o644))
	h := start(t, m, securefs.ModeAuto)
	ctx := context.Background()
	before, err := h.c.Health(ctx)
	testutil.Must(t, err)
	testutil.Must(t, os.WriteFile(m, []byte(bad), 0o644))
	_, err = h.c.Reload(ctx)
	want := `manifest: tools.write_file.roots[0]: "workspace" (` + filepath.Join(base, "workspace") + `) can reach ` + m + `, the manifest: a write tool could rewrite the policy`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("reload: %v, want %q", err, want)
	}
	if now, _ := h.c.Health(ctx); now.PolicyVersion != before.PolicyVersion {
		t.Fatal("a refused reload changed the policy")
	}
	if res, _ := h.call("write_file", map[string]string{"path": "workspace/manifest.json", "content": "{}"}); res.OK {
		t.Fatal("the refused policy's write tool ran")
	}
}
