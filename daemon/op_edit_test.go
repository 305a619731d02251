//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/sluicehq/sluice/daemon/recovery"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// changeFixture: a base with ws/ (the root of edit, move and mkdir tools,
// never ".env", "private/**" and "proj/secret/**"), outside/ beside it
// with a file to keep, and links out of the root: ws/out -> ../outside
// (a directory) and ws/out.txt -> ../outside/keep.txt (a file).
func changeFixture(t *testing.T) (base string, h *harness) {
	t.Helper()
	testutil.RequireRoot(t)
	base = t.TempDir()
	for _, d := range []string{"ws", "outside"} {
		testutil.Must(t, os.MkdirAll(filepath.Join(base, d), 0o755))
	}
	testutil.Must(t, os.WriteFile(filepath.Join(base, "outside/keep.txt"), []byte("keep me\n"), 0o644))
	testutil.Must(t, os.Symlink("../outside", filepath.Join(base, "ws/out")))
	testutil.Must(t, os.Symlink("../outside/keep.txt", filepath.Join(base, "ws/out.txt")))
	never := `"never":[".env","private/**","proj/secret/**"]`
	m := writeManifest(t, base, `{"schema_version":1,"tools":{
	  "edit_file":{"operation":"edit","roots":["ws"],`+never+`},
	  "move_file":{"operation":"move","roots":["ws"],`+never+`},
	  "make_dir":{"operation":"mkdir","roots":["ws"],`+never+`,"dir_mode":"0750"},
	  "read_file":{"operation":"read","roots":["ws"],`+never+`}}}`)
	return base, start(t, m, securefs.ModeAuto)
}

// outsideIntact fails when anything beside keep.txt appeared outside the
// root, or keep.txt changed.
func outsideIntact(t *testing.T, base string) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(base, "outside"))
	testutil.Must(t, err)
	if len(ents) != 1 || ents[0].Name() != "keep.txt" {
		t.Fatalf("outside the root changed: %v", ents)
	}
	fileIs(t, filepath.Join(base, "outside/keep.txt"), "keep me\n")
}

type anEdit = api.Edit

// TestEditTable: edit over the socket, allowed cases, errors and escapes.
func TestEditTable(t *testing.T) {
	base, h := changeFixture(t)
	ws := filepath.Join(base, "ws")
	orig := "one\ntwo\nthree\ntwo-ish\n"
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte(orig), 0o640))
	testutil.Must(t, os.WriteFile(filepath.Join(ws, ".env"), []byte("K=v\n"), 0o644))
	testutil.Must(t, os.MkdirAll(filepath.Join(ws, "private"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "private/k"), []byte("k\n"), 0o644))
	testutil.Must(t, os.MkdirAll(filepath.Join(ws, "d"), 0o755))
	call := func(args map[string]any) *api.CallResult { r, _ := h.call("edit_file", args); return r }
	one := []anEdit{{OldText: "three\n", NewText: "THREE-MARK\n"}}
	for _, tc := range []struct {
		name   string
		args   map[string]any
		reason api.Reason
		output string // a substring of the output
	}{
		{"zero matches", map[string]any{"path": "ws/a.txt", "edits": []anEdit{{OldText: "four", NewText: "4"}}},
			api.ReasonPreconditionFailed, "args.edits[0].old_text is not in the file (0 matches"},
		{"two matches", map[string]any{"path": "ws/a.txt", "edits": []anEdit{{OldText: "three", NewText: "3"}, {OldText: "two", NewText: "2"}}},
			api.ReasonPreconditionFailed, "args.edits[1].old_text occurs 2 times"},
		{"matches left by an earlier edit", map[string]any{"path": "ws/a.txt", "edits": []anEdit{{OldText: "one", NewText: "three"}, {OldText: "three", NewText: "x"}}},
			api.ReasonPreconditionFailed, "args.edits[1].old_text occurs 2 times"},
		{"stale if_match", map[string]any{"path": "ws/a.txt", "edits": one, "if_match": sha256Of([]byte("older"))},
			api.ReasonPreconditionFailed, "if_match"},
		{"empty old_text", map[string]any{"path": "ws/a.txt", "edits": []anEdit{{OldText: "", NewText: "x"}}}, api.ReasonInvalidArgs, ""},
		{"no edits", map[string]any{"path": "ws/a.txt", "edits": []anEdit{}}, api.ReasonInvalidArgs, ""},
		{"absent", map[string]any{"path": "ws/none.txt", "edits": one}, api.ReasonNotFound, ""},
		{"directory", map[string]any{"path": "ws/d", "edits": one}, api.ReasonNotAFile, ""},
		{"outside", map[string]any{"path": "outside/keep.txt", "edits": one}, api.ReasonOutsideRoots, ""},
		{"dotdot", map[string]any{"path": "ws/../outside/keep.txt", "edits": one}, api.ReasonOutsideRoots, ""},
		{"absolute", map[string]any{"path": filepath.Join(base, "ws/a.txt"), "edits": one}, api.ReasonInvalidPath, ""},
		{"symlinked dir out", map[string]any{"path": "ws/out/keep.txt", "edits": []anEdit{{OldText: "keep", NewText: "lost"}}}, api.ReasonOutsideRoots, ""},
		{"symlink final name, never followed", map[string]any{"path": "ws/out.txt", "edits": []anEdit{{OldText: "keep", NewText: "lost"}}}, api.ReasonUnsupportedFileType, ""},
		{"never by name", map[string]any{"path": "ws/.env", "edits": []anEdit{{OldText: "K", NewText: "J"}}}, api.ReasonNeverListed, ""},
		{"never by path", map[string]any{"path": "ws/private/k", "edits": []anEdit{{OldText: "k", NewText: "j"}}}, api.ReasonNeverListed, ""},
		{"dry run", map[string]any{"path": "ws/a.txt", "edits": one, "dry_run": true}, api.ReasonAllowed, "-three\n+THREE-MARK\n"},
	} {
		res := call(tc.args)
		if res.Reason != tc.reason || res.OK != (tc.reason == api.ReasonAllowed) {
			t.Errorf("%s: %s ok=%v (%v), want %s", tc.name, res.Reason, res.OK, derefOr(res.Output), tc.reason)
		}
		if tc.output != "" && !strings.Contains(derefOr(res.Output), tc.output) {
			t.Errorf("%s: output %q, want it to contain %q", tc.name, derefOr(res.Output), tc.output)
		}
		if tc.name == "dry run" && res.SHA256 != sha256Of([]byte(strings.Replace(orig, "three\n", "THREE-MARK\n", 1))) {
			t.Errorf("dry run: sha256 %s is not the would-be content's", res.SHA256)
		}
		// Nothing above changed anything.
		fileIs(t, filepath.Join(ws, "a.txt"), orig)
	}
	outsideIntact(t, base)
	fileIs(t, filepath.Join(ws, ".env"), "K=v\n")

	// Allowed: applied in order, with the caller's if_match; the diff is
	// the output, the new digest the result, the mode kept.
	res := call(map[string]any{"path": "ws/a.txt", "if_match": sha256Of([]byte(orig)),
		"edits": []anEdit{{OldText: "one\n", NewText: "ONE\n"}, {OldText: "three\n", NewText: "THREE-MARK\n"}}})
	want := "ONE\ntwo\nTHREE-MARK\ntwo-ish\n"
	if !res.OK || res.SHA256 != sha256Of([]byte(want)) || !strings.Contains(derefOr(res.Output), "-one\n+ONE\n") {
		t.Fatalf("edit: %+v %q", res, derefOr(res.Output))
	}
	fileIs(t, filepath.Join(ws, "a.txt"), want)
	if fi, err := os.Stat(filepath.Join(ws, "a.txt")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("the edited file's mode: %v %v", fi.Mode(), err)
	}
	// The ledger holds digests and lengths, never the texts.
	if l := string(h.ledger()); strings.Contains(l, "THREE-MARK") || !strings.Contains(l, `"old_sha256"`) {
		t.Fatal("the ledger holds an edit's text, or not its digests")
	}
	if r := h.results("edit_file"); len(r) == 0 || r[len(r)-1].Result.SHA256 != sha256Of([]byte(want)) {
		t.Fatalf("result record: %+v", r)
	}
	leftTemps(t, ws)
}

// TestEditChangedBeforeCommit: the file changes between the edit's read
// and its commit (another process's write, here from the hook); the edit
// fails precondition_failed and the other write stands: the digest of
// what was read is the commit's precondition.
func TestEditChangedBeforeCommit(t *testing.T) {
	base, h := changeFixture(t)
	p := filepath.Join(base, "ws/a.txt")
	testutil.Must(t, os.WriteFile(p, []byte("a\nb\n"), 0o644))
	testHookBeforeCommit = func(*call) { testutil.Must(t, os.WriteFile(p, []byte("a\nb\nc\n"), 0o644)) }
	t.Cleanup(func() { testHookBeforeCommit = nil })
	res, _ := h.call("edit_file", map[string]any{"path": "ws/a.txt", "edits": []anEdit{{OldText: "b", NewText: "B"}}})
	if res.OK || res.Reason != api.ReasonPreconditionFailed {
		t.Fatalf("edit over a concurrent change: %+v", res)
	}
	fileIs(t, p, "a\nb\nc\n")
	leftTemps(t, filepath.Join(base, "ws"))
}

// TestApprovalShowsEditDiff: a parked edit is listed with the file as it
// is now and the diff its edits make of it; approved, it commits.
func TestApprovalShowsEditDiff(t *testing.T) {
	base, _ := parkFixture(t)
	target := filepath.Join(base, "workspace/src/e.txt")
	testutil.Must(t, os.WriteFile(target, []byte("one\ntwo\nthree\n"), 0o644))
	m := writeManifest(t, base, `{"schema_version":1,
	  "principals":{"agent":{"uids":[4242],"tools":["*"]},"ops":{"uids":[0],"approver":true,"tools":[]}},
	  "tools":{"ask_edit":{"operation":"edit","roots":["workspace/src"],"approval":"human"}}}`)
	h := start(t, m, securefs.ModeAuto)
	agent := clientAs(h.socket, agentUID)
	defer agent.Close()
	s := startStream(agent, context.Background(), api.CallRequest{Tool: "ask_edit",
		Args: mustJSON(map[string]any{"path": "workspace/src/e.txt", "edits": []anEdit{{OldText: "two", NewText: "2"}}})})
	s.next(t, "pending")
	list := waitListed(t, h, 1)
	ch := list[0].Change
	wantDiff := "--- a/workspace/src/e.txt\n+++ b/workspace/src/e.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
	if ch == nil || ch.Kind != api.OpEdit || ch.Diff != wantDiff || ch.Current == nil || ch.Current.SHA256 != sha256Of([]byte("one\ntwo\nthree\n")) ||
		ch.New == nil || ch.New.SHA256 != sha256Of([]byte("one\n2\nthree\n")) {
		t.Fatalf("listed change: %+v", ch)
	}
	if strings.Contains(string(list[0].Args), `"two"`) {
		t.Fatalf("listed args hold the edit's text: %s", list[0].Args)
	}
	if _, err := h.c.Decide(context.Background(), list[0].ApprovalID, true, ""); err != nil {
		t.Fatal(err)
	}
	if r := s.wait(t); !r.OK || r.SHA256 != sha256Of([]byte("one\n2\nthree\n")) {
		t.Fatalf("approved edit: %+v", r)
	}
	fileIs(t, target, "one\n2\nthree\n")
	waitSpills(t, h.stateDir, 0)
}

// TestRecoverInterruptedEdit: an edit commits through the write path, so
// a crash between its durable decision and its rename leaves the write's
// temp name beside the file; the next start removes it (recover.go, from
// the edit's decision record) and says so. Move and mkdir name nothing
// but their target: they leave no temp file to recover.
func TestRecoverInterruptedEdit(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	testutil.Must(t, os.MkdirAll(filepath.Join(ws, "sub"), 0o755))
	target := filepath.Join(ws, "sub/a.txt")
	testutil.Must(t, os.WriteFile(target, []byte("v1\n"), 0o644))
	m := writeManifest(t, base, `{"schema_version":1,"tools":{"edit_file":{"operation":"edit","roots":["ws"]}}}`)
	dir := t.TempDir()
	cfg := Config{Manifest: m, Socket: filepath.Join(dir, "s.sock"), StateDir: filepath.Join(dir, "state"),
		RunDir: filepath.Join(dir, "run"), Helper: testutil.Helper(t), Logger: slog.New(slog.NewJSONHandler(&testutil.LockedBuffer{}, nil))}
	stop := launch(t, cfg)
	h := &harness{t: t, socket: cfg.Socket, stateDir: cfg.StateDir, c: client.New(cfg.Socket)}
	if res, _ := h.call("edit_file", map[string]any{"path": "ws/sub/a.txt", "edits": []anEdit{{OldText: "v1", NewText: "v2"}}}); !res.OK {
		t.Fatalf("edit: %+v", res)
	}
	h.c.Close()
	stop()
	var dec *audit.Record
	for _, line := range bytes.Split(bytes.TrimSpace(h.ledger()), []byte("\n")) {
		var r audit.Record
		testutil.Must(t, json.Unmarshal(line, &r))
		if r.Kind == audit.KindDecision && r.Operation == api.OpEdit {
			dec = &r
		}
	}
	if dec == nil {
		t.Fatal("no edit decision recorded")
	}
	// The crash: the decision durable, no result, the temp file there.
	l, _, err := audit.Open(filepath.Join(cfg.StateDir, "audit.jsonl"))
	testutil.Must(t, err)
	id := "c-01RECOVEREDITAAAAAAAAAAAAA"
	dec.CallID, dec.Seq, dec.Prev, dec.Hash = id, 0, "", ""
	testutil.Must(t, l.AppendSync(dec))
	testutil.Must(t, l.Close())
	temp := filepath.Join(ws, "sub", writeTempName(id))
	testutil.Must(t, os.WriteFile(temp, []byte("half"), 0o600))
	os.Remove(filepath.Join(cfg.StateDir, recovery.CleanStopFile))
	stop = launch(t, cfg)
	stop()
	if exists(temp) {
		t.Fatal("recovery left an interrupted edit's temp file")
	}
	fileIs(t, target, "v2\n")
	if !strings.Contains(string(h.ledger()), `"call_id":"`+id+`","detail":"removed the temp file of an interrupted write: ws/sub/`+writeTempName(id)) {
		t.Fatalf("no recovered record for the edit:\n%s", h.ledger())
	}
	for _, op := range []api.Operation{api.OpMove, api.OpMkdir} {
		if operations[op].tempName != nil {
			t.Errorf("%s names a temp file", op)
		}
	}
}
