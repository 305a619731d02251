//go:build linux

package policyfiles

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestCheckWrites: a write or delete root that holds the manifest's
// directory, or an ancestor of it, is refused by name; a root beside it,
// or a read root over it, is not. (The daemon's TestPolicyOutOfWriteRoots
// covers symlinks and bind mounts through whole loads.)
func TestCheckWrites(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{"etc/sluice", "work"} {
		testutil.Must(t, os.MkdirAll(filepath.Join(base, d), 0o755))
	}
	for _, c := range []struct{ op, root, want string }{
		{"write", "etc/sluice", `tools.t.roots[0]: "etc/sluice"`},
		{"delete", "etc", `tools.t.roots[0]: "etc"`},
		{"write", ".", `tools.t.roots[0]: "."`},
		{"write", "work", ""},
		{"read", "etc", ""},
	} {
		doc := `{"schema_version":1,"tools":{"t":{"operation":"` + c.op + `","roots":["` + c.root + `"]}}}`
		mp := filepath.Join(base, "etc/sluice/manifest.json")
		testutil.Must(t, os.WriteFile(mp, []byte(doc), 0o644))
		pf := New()
		data, err := pf.Read("manifest", mp)
		testutil.Must(t, err)
		m, err := authz.ParseFile(mp, bytes.NewReader(data), base)
		testutil.Must(t, err)
		root, err := securefs.OpenRoot(filepath.Join(base, c.root), securefs.ModeAuto)
		testutil.Must(t, err)
		err = pf.CheckWrites(m, map[string][]*securefs.Root{"t": {root}})
		root.Close()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s root %q: %v, want %q", c.op, c.root, err, c.want)
		}
	}
}
