//go:build linux

package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestViewSeesWritesAtOnce: a tool's view is cached by the kernel for
// minutes, yet a command sees every change made before it started: an
// agent's write_file, a host edit, a new file and a removed one, each the
// very next call (no waiting for a timeout). stat's size and the listing
// are what git status and test collection look at; a secret created in
// between is still absent.
func TestViewSeesWritesAtOnce(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	src := filepath.Join(fx.Base, "workspace/src/fresh")
	testutil.Must(t, os.Mkdir(src, 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "note.txt"), []byte("x"), 0o644))
	m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{
		"write_file":{"operation":"write","roots":["workspace/src"]},
		"look":{"operation":"execute","mounts":["workspace/src/fresh"],"cwd":"workspace/src/fresh","never":[".env","*.pem"],
			"commands":[["sh","-c","stat -c %s note.txt; ls"]],"pool":1}}}`)
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.UIDRange = viewsUIDs })
	look := func() string {
		t.Helper()
		res, body := h.call("look", map[string]any{})
		if res.Reason != api.ReasonAllowed {
			t.Fatalf("look: %s", body)
		}
		return callOutput(res)
	}
	files := func(names ...string) string { return strings.Join(names, "\n") + "\n" }
	if got, want := look(), "1\n"+files("note.txt"); got != want {
		t.Fatalf("first look: %q, want %q", got, want)
	}
	for i := 2; i <= 12; i++ {
		content := strings.Repeat("y", i)
		if i%2 == 0 {
			res, body := h.call("write_file", map[string]any{"path": "workspace/src/fresh/note.txt", "content": content})
			if !res.OK {
				t.Fatalf("write_file: %s", body)
			}
		} else {
			testutil.Must(t, os.WriteFile(filepath.Join(src, "note.txt"), []byte(content), 0o644))
		}
		if got, want := look(), fmt.Sprintf("%d\n", i)+files("note.txt"); got != want {
			t.Errorf("after writing %d bytes: %q, want %q", i, got, want)
		}
	}
	testutil.Must(t, os.WriteFile(filepath.Join(src, "new.py"), []byte("n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "id.pem"), []byte(escapetest.Secret), 0o644))
	if got, want := look(), "12\n"+files("new.py", "note.txt"); got != want {
		t.Errorf("after a create: %q, want %q", got, want)
	}
	testutil.Must(t, os.Remove(filepath.Join(src, "new.py")))
	if got, want := look(), "12\n"+files("note.txt"); got != want {
		t.Errorf("after a remove: %q, want %q", got, want)
	}
}
