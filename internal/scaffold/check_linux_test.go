package scaffold

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/daemon"
	"github.com/sluicehq/sluice/sandbox"
)

// The manifests pass what sluiced --check runs (daemon.Check: parse, roots
// opened beneath base, no write root reaching the manifest, mounts
// resolved), without a warning, written where the CLI writes them.
func TestSluicedCheck(t *testing.T) {
	for _, p := range projects {
		t.Run(p.name, func(t *testing.T) {
			dir := makeProject(t, p.files)
			out := t.TempDir()
			for _, f := range []Format{TOML, JSON} {
				r, err := Generate(opts(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(out, "m"+f.Ext())
				if err := WriteFile(file, r.Data, false); err != nil {
					t.Fatal(err)
				}
				var logs warnings
				if _, err := daemon.Check(file, slog.New(&logs)); err != nil {
					t.Fatalf("%s: sluiced --check refuses it: %v", f, err)
				}
				if len(logs.msgs) > 0 {
					t.Errorf("%s: warnings: %v", f, logs.msgs)
				}
			}
		})
	}
}

// A manifest inside the project is refused by sluiced (its write roots
// reach it): why the CLI refuses --output inside DIR.
func TestSluicedRefusesManifestInProject(t *testing.T) {
	dir := makeProject(t, projects[0].files)
	r, err := Generate(opts(dir, TOML))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "sluice.toml")
	if err := WriteFile(file, r.Data, false); err != nil {
		t.Fatal(err)
	}
	if !Inside(file, dir) {
		t.Error("Inside says no")
	}
	if _, err := daemon.Check(file, nil); err == nil || !strings.Contains(err.Error(), "could rewrite the policy") {
		t.Errorf("sluiced accepts a manifest its write tools can reach: %v", err)
	}
}

// sandboxPath is the container's PATH.
func TestSandboxPath(t *testing.T) {
	if sandboxPath != sandbox.DefaultPath {
		t.Errorf("sandboxPath %q, sandbox.DefaultPath %q", sandboxPath, sandbox.DefaultPath)
	}
}

type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Message)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }
