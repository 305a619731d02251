//go:build linux

package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestReview4NeverDoubleStar: never ["**"] hides everything beneath the
// roots, for the file tools and inside an execute tool's view. It hid
// nothing: "**" alone compiled to a component that matches no name.
func TestReview4NeverDoubleStar(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	testutil.Must(t, os.Chmod(base, 0o755))
	src := filepath.Join(base, "workspace/src")
	testutil.Must(t, os.MkdirAll(filepath.Join(src, "sub"), 0o755))
	for _, f := range []string{"secret.txt", "sub/key"} {
		testutil.Must(t, os.WriteFile(filepath.Join(src, f), []byte(escapetest.Secret+" "+f+"\n"), 0o644))
	}
	never := `"never":["**"]`
	m := writeManifest(t, base, `{"schema_version":1,"tools":{
	  "read_file":{"operation":"read","roots":["workspace/src"],`+never+`},
	  "list_dir":{"operation":"list","roots":["workspace/src"],`+never+`},
	  "write_file":{"operation":"write","roots":["workspace/src"],`+never+`},
	  "cat_all":{"operation":"execute","commands":[["sh","-c","cat secret.txt sub/key; ls -a; echo done"]],
	    "mounts":["workspace/src"],"cwd":"workspace/src","pool":0,`+never+`}}}`)
	h := start(t, m, securefs.ModeAuto)
	for _, p := range []string{"workspace/src/secret.txt", "workspace/src/sub/key"} {
		res, body := h.call("read_file", map[string]any{"path": p})
		if res.Verdict != "deny" || res.Reason != "never_listed" {
			t.Errorf("read_file %q: %s/%s, want deny/never_listed", p, res.Verdict, res.Reason)
		}
		if bytes.Contains(body, []byte(escapetest.Secret)) {
			t.Errorf("read_file %q: the secret is in the response: %s", p, body)
		}
	}
	res, body := h.call("write_file", map[string]any{"path": "workspace/src/secret.txt", "content": "pwned\n"})
	if res.Verdict != "deny" || res.Reason != "never_listed" {
		t.Errorf("write_file: %s/%s, want deny/never_listed: %s", res.Verdict, res.Reason, body)
	}
	res, body = h.call("list_dir", map[string]any{"path": "workspace/src"})
	if bytes.Contains(body, []byte("secret.txt")) || bytes.Contains(body, []byte(`"sub"`)) {
		t.Errorf("list_dir shows a hidden name: %s", body)
	}
	res, body = h.call("cat_all", map[string]any{})
	if res.Verdict != "allow" || res.Output == nil || !strings.Contains(*res.Output, "done") {
		t.Fatalf("cat_all: %s/%s, want allow and done: %s", res.Verdict, res.Reason, body)
	}
	if bytes.Contains(body, []byte(escapetest.Secret)) || strings.Contains(*res.Output, "secret.txt\n") {
		t.Errorf("the view shows a hidden file: %s", body)
	}
	if b := h.ledger(); bytes.Contains(b, []byte(escapetest.Secret)) {
		t.Errorf("the secret is in the ledger")
	}
}
