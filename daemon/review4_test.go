//go:build linux

package daemon

import (
	"context"

	"bytes"
	"github.com/sluicehq/sluice/api"
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

// TestReview4NestedRootsNever: with nested roots ("workspace" and
// "workspace/src") a never glob anchored at a root ("private/**") hides
// workspace/src/private under every spelling. It was hidden only when the
// request was spelled beneath workspace/src: "workspace/src/../src/private/k",
// "workspace/other/../src/private/k" or a symlink in workspace resolved
// beneath "workspace" alone, and the file was read, overwritten and
// deleted; a listing of workspace/src beneath "workspace" showed "private".
func TestReview4NestedRootsNever(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	testutil.Must(t, os.Chmod(base, 0o755))
	ws := filepath.Join(base, "workspace")
	testutil.Must(t, os.MkdirAll(filepath.Join(ws, "src/private"), 0o755))
	testutil.Must(t, os.MkdirAll(filepath.Join(ws, "other"), 0o755))
	secret := filepath.Join(ws, "src/private/k")
	testutil.Must(t, os.WriteFile(secret, []byte(escapetest.Secret+" k\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "src/main.py"), []byte("print('hello')\n"), 0o644))
	testutil.Must(t, os.Symlink("src", filepath.Join(ws, "link")))
	roots := `"roots":["workspace","workspace/src"],"never":["private/**"]`
	m := writeManifest(t, base, `{"schema_version":1,"tools":{
	  "read_file":{"operation":"read",`+roots+`},
	  "list_dir":{"operation":"list",`+roots+`},
	  "write_file":{"operation":"write",`+roots+`},
	  "delete_file":{"operation":"delete",`+roots+`}}}`)
	h := start(t, m, securefs.ModeAuto)
	spellings := []string{"workspace/src/private/k", "workspace/src/../src/private/k",
		"workspace/other/../src/private/k", "workspace/link/private/k"}
	for _, p := range spellings {
		res, body := h.call("read_file", map[string]any{"path": p})
		if res.Verdict != "deny" || res.Reason != "never_listed" {
			t.Errorf("read_file %q: %s/%s, want deny/never_listed", p, res.Verdict, res.Reason)
		}
		if bytes.Contains(body, []byte(escapetest.Secret)) {
			t.Errorf("read_file %q: the secret is in the response: %s", p, body)
		}
		if res, body = h.call("write_file", map[string]any{"path": p, "content": "pwned\n"}); res.Verdict != "deny" || res.Reason != "never_listed" {
			t.Errorf("write_file %q: %s/%s, want deny/never_listed: %s", p, res.Verdict, res.Reason, body)
		}
		if res, body = h.call("delete_file", map[string]any{"path": p}); res.Verdict != "deny" || res.Reason != "never_listed" {
			t.Errorf("delete_file %q: %s/%s, want deny/never_listed: %s", p, res.Verdict, res.Reason, body)
		}
		dir := strings.TrimSuffix(p, "/k")
		if res, body = h.call("list_dir", map[string]any{"path": dir}); res.Verdict != "deny" || res.Reason != "never_listed" {
			t.Errorf("list_dir %q: %s/%s, want deny/never_listed: %s", dir, res.Verdict, res.Reason, body)
		}
	}
	for _, p := range []string{"workspace/src", "workspace/other/../src", "workspace/link"} {
		res, body := h.call("list_dir", map[string]any{"path": p})
		if res.Verdict != "allow" || res.Output == nil || !strings.Contains(*res.Output, `"main.py"`) {
			t.Errorf("list_dir %q: %s/%s, want allow with main.py: %s", p, res.Verdict, res.Reason, body)
		}
		if bytes.Contains(body, []byte(`"private"`)) {
			t.Errorf("list_dir %q shows a hidden name: %s", p, body)
		}
	}
	if b, err := os.ReadFile(secret); err != nil || !bytes.Contains(b, []byte(escapetest.Secret)) {
		t.Errorf("the hidden file changed: %q, %v", b, err)
	}
	if b := h.ledger(); bytes.Contains(b, []byte(escapetest.Secret)) {
		t.Errorf("the secret is in the ledger")
	}
}

// TestReview4TaskWithDotsCancellable: a task id may hold any character but
// a control one, so a task named ".." or "a..b" must be cancellable like
// any other. The router refused every path holding "..", so such a task
// could not be cancelled: its parked calls stayed parked and its running
// ones ran on, whoever asked.
func TestReview4TaskWithDotsCancellable(t *testing.T) {
	_, m := lifecycleFixture(t, "")
	h := start(t, m, securefs.ModeAuto)
	agent := clientAs(h.socket, agentUID)
	defer agent.Close()
	ctx := context.Background()
	for _, task := range []string{"..", "a..b", "../x"} {
		parked := startStream(agent, ctx, api.CallRequest{Tool: "ask_read", Args: pathArgs("workspace/src/a.py"), Task: task})
		if ev := parked.next(t, "the parked decision"); ev.Verdict != api.VerdictPending {
			t.Fatalf("task %q: parked: %s", task, ev.Raw)
		}
		tc, err := agent.CancelTask(ctx, task)
		if err != nil || tc.Ended != 1 {
			t.Errorf("task %q: cancel: %+v %v", task, tc, err)
			if ap, err := h.c.Approvals(ctx); err == nil { // deny it, so that the stream ends
				for _, a := range ap.Approvals {
					h.c.Decide(ctx, a.ApprovalID, false, "")
				}
			}
		}
		if r := parked.wait(t); err == nil && r.Reason != api.ReasonTaskCancelled {
			t.Errorf("task %q: parked after cancel: %+v", task, r)
		}
	}
}

// TestReview4NestedRootsCaseInsensitive: nested roots on a case-insensitive
// disk. "workspace/SRC/private/key" lies lexically beneath "workspace"
// alone, and the kernel names what it opened with the spelling asked for;
// the inner root "workspace/src" still hides it.
func TestReview4NestedRootsCaseInsensitive(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	testutil.Must(t, os.Chmod(base, 0o755))
	backing := filepath.Join(base, "backing")
	testutil.Must(t, os.MkdirAll(filepath.Join(backing, "src/private"), 0o755))
	testutil.Must(t, os.MkdirAll(filepath.Join(base, "workspace"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(backing, "src/private/key"), []byte(escapetest.Secret+" key\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(backing, "src/main.py"), []byte("print('hello')\n"), 0o644))
	mountCaseInsensitive(t, backing, filepath.Join(base, "workspace"))
	roots := `"roots":["workspace","workspace/src"],"never":["private/**"]`
	m := writeManifest(t, base, `{"schema_version":1,"tools":{
	  "read_file":{"operation":"read",`+roots+`},
	  "list_dir":{"operation":"list",`+roots+`}}}`)
	h := start(t, m, securefs.ModeAuto)
	if res, body := h.call("read_file", map[string]any{"path": "workspace/SRC/main.py"}); res.Verdict != "allow" {
		t.Fatalf("read_file workspace/SRC/main.py: %s/%s, want allow (is the loopback case-insensitive?): %s", res.Verdict, res.Reason, body)
	}
	for _, p := range []string{"workspace/SRC/private/key", "workspace/Src./private/key", "workspace/SRC/../src/private/key"} {
		res, body := h.call("read_file", map[string]any{"path": p})
		if res.Verdict != "deny" || res.Reason != "never_listed" {
			t.Errorf("read_file %q: %s/%s, want deny/never_listed", p, res.Verdict, res.Reason)
		}
		if bytes.Contains(body, []byte(escapetest.Secret)) {
			t.Errorf("read_file %q: the secret is in the response: %s", p, body)
		}
	}
	res, body := h.call("list_dir", map[string]any{"path": "workspace/SRC"})
	if res.Verdict != "allow" || bytes.Contains(body, []byte(`"private"`)) {
		t.Errorf("list_dir workspace/SRC: %s/%s, want allow without private: %s", res.Verdict, res.Reason, body)
	}
}
