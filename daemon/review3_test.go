//go:build linux

package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestBreachViewStaleMode (review 3): a workspace file the host makes
// unreadable to others (chmod 600) is not readable by the next command,
// though the kernel cached the view's attributes of it (mode 644) for 10
// minutes and the chmod went through a hard link outside the workspace,
// which inotify reports to no watched directory. Before the view checked
// each open against the mode it resolves, the command read it. (The tool
// allows hard links: with never globs, a file with a second name is
// refused outright, TestHardLinksUnderNever.)
func TestBreachViewStaleMode(t *testing.T) {
	fx, m := viewsFixture(t, map[string]string{"cat": `"commands":[["cat","note.txt"]],"pool":1,"hard_links":"allow"`})
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.UIDRange = viewsUIDs })
	cat := func() (*api.CallResult, string) {
		t.Helper()
		res, body := h.call("cat", map[string]any{})
		if res.Reason != api.ReasonAllowed {
			t.Fatalf("cat: %s", body)
		}
		return res, callOutput(res)
	}
	if res, out := cat(); !res.OK || !strings.Contains(out, viewContent) {
		t.Fatalf("before: %q", out)
	}
	link := filepath.Join(fx.Base, "note-link")
	testutil.Must(t, os.Link(filepath.Join(fx.Base, "workspace/src/note.txt"), link))
	testutil.Must(t, os.Chmod(link, 0o600))
	if res, out := cat(); res.OK || strings.Contains(out, viewContent) {
		t.Errorf("after chmod 600 through a hard link: the command read %q", out)
	}
	testutil.Must(t, os.Chmod(link, 0o644))
	if res, out := cat(); !res.OK || !strings.Contains(out, viewContent) {
		t.Errorf("after chmod 644 again: %q", out)
	}
}
