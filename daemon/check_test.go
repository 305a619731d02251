//go:build linux

package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestCheck: Check (sluiced --check) accepts what a start accepts, without
// starting a sandbox, and refuses what a start refuses with the same
// error.
func TestCheck(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	good := writeManifest(t, fx.Base, `{"schema_version":1,
	  "principals":{"agent":{"uids":[4242],"tools":["*"]},"ops":{"uids":[0],"approver":true,"tools":[]}},
	  "tools":{"read_src":{"operation":"read","roots":["workspace/src"]},
	           "tests":{"operation":"execute","commands":[["true"]],"mounts":["workspace/src"],"pool":2}}}`)
	s, err := Check(good, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Tools != 2 || s.Execute != 1 || s.Principals != 2 || !strings.HasPrefix(s.PolicyVersion, "sha256:") || s.Manifest != good {
		t.Fatalf("summary: %+v", s)
	}
	if line := s.String(); !strings.HasPrefix(line, "ok: "+good+": 2 tools, 2 principals, policy_version sha256:") ||
		!strings.Contains(line, "1 execute tools: their sandbox was not started") || strings.Contains(line, "\n") {
		t.Fatalf("summary line: %q", line)
	}

	bad := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(fx.Base, name)
		testutil.Must(t, os.WriteFile(p, []byte(body), mode))
		testutil.Must(t, os.Chmod(p, mode))
		return p
	}
	for _, c := range []struct{ name, path, want string }{
		{"not JSON", bad("m1.json", `{"schema_version":1,`, 0o644), "m1.json:1:21: not valid JSON"},
		{"unknown operation", bad("m2.json", `{"schema_version":1,"tools":{"x":{"operation":"frobnicate"}}}`, 0o644), "frobnicate"},
		{"a missing base", bad("m3.json", `{"schema_version":1,"base":"no/such/dir","tools":{"r":{"operation":"read","roots":["."]}}}`, 0o644), "no/such/dir"},
		{"a write root that reaches the manifest", bad("m4.json", `{"schema_version":1,"tools":{"w":{"operation":"write","roots":["."]}}}`, 0o644), "m4.json"},
		{"a mount escaping base", bad("m5.json", `{"schema_version":1,"tools":{"e":{"operation":"execute","commands":[["true"]],"mounts":["../.."]}}}`, 0o644), "mounts"},
	} {
		_, err := Check(c.path, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Check says %v, want an error naming %q", c.name, err, c.want)
			continue
		}
		if started := runRefused(t, c.path); started == nil || started.Error() != err.Error() {
			t.Errorf("%s: Check says %q, a start %v", c.name, err, started)
		}
	}
}
