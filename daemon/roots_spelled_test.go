//go:build linux

package daemon

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestNestedRootsSpelledAsTheKernel: a tool with several roots and never
// globs is refused at load when a root is reached through a symlink, so
// that the roots nest as their names say (the fourth review's remaining
// case: an inner root "workspace/alias", a symlink to "workspace/src",
// would have left workspace/src/private/k, reached beneath "workspace",
// outside the never glob "private/**" anchored at the inner root). One
// root, no never globs, or roots spelled as on disk load as before.
func TestNestedRootsSpelledAsTheKernel(t *testing.T) {
	base := t.TempDir()
	ws := filepath.Join(base, "workspace")
	testutil.Must(t, os.MkdirAll(filepath.Join(ws, "src/private"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "src/private/k"), []byte("k\n"), 0o644))
	testutil.Must(t, os.Symlink("src", filepath.Join(ws, "alias")))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	load := func(tool string) error {
		m := writeManifest(t, base, `{"schema_version":1,"tools":{"read_file":`+tool+`}}`)
		p, err := loadPolicy(m, securefs.ModeAuto, log)
		if err == nil {
			p.close()
		}
		return err
	}
	err := load(`{"operation":"read","roots":["workspace","workspace/alias"],"never":["private/**"]}`)
	if err == nil || !strings.Contains(err.Error(), `tools.read_file.roots[1]: "workspace/alias" is "workspace/src" as the kernel names it`) {
		t.Fatalf("nested roots through a symlink, with never globs: %v, want refused naming the root", err)
	}
	for _, ok := range []string{
		`{"operation":"read","roots":["workspace","workspace/src"],"never":["private/**"]}`,
		`{"operation":"read","roots":["workspace","workspace/alias"]}`,
		`{"operation":"read","roots":["workspace/alias"],"never":["private/**"]}`,
		`{"operation":"read","roots":["workspace/./src/","workspace"],"never":["private/**"]}`,
	} {
		if err := load(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
