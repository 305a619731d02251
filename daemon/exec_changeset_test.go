//go:build linux

package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/daemon/recovery"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// changesetFixture is a workspace for commands that write: src (the
// writes root) with a file to edit, one to delete, a subdirectory, and
// what never hides (.env, id.pem, private/); other (mounted, writable in
// the scratch layer, outside writes.roots); sync (a read-only mount a
// test releases a command through).
func changesetFixture(t *testing.T, tools string) (base, manifest string) {
	t.Helper()
	testutil.RequireRoot(t)
	base = t.TempDir()
	testutil.Must(t, os.Chmod(base, 0o755))
	for p, c := range map[string]string{
		"workspace/src/a.py":          "print('a')\n",
		"workspace/src/b.txt":         "b\n",
		"workspace/src/sub/c.txt":     "c\n",
		"workspace/src/.env":          "SECRET=1\n",
		"workspace/src/id.pem":        "KEY\n",
		"workspace/src/private/p.txt": "private\n",
		"workspace/src/keys/k.pem":    "KEY\n",
		"workspace/src/keys/pub.txt":  "pub\n",
		"workspace/other/o.txt":       "o\n",
		"sync/.keep":                  "",
	} {
		testutil.Must(t, os.MkdirAll(filepath.Dir(filepath.Join(base, p)), 0o755))
		testutil.Must(t, os.WriteFile(filepath.Join(base, p), []byte(c), 0o644))
	}
	manifest = writeManifest(t, base, `{"schema_version":1,"tools":{`+tools+`}}`)
	return base, manifest
}

// csTool is an execute tool running `sh -c SCRIPT` in src with writes.
func csTool(name, commit, extra string) string {
	return `"` + name + `":{"operation":"execute","mounts":["workspace","sync"],"cwd":"workspace/src","pool":0,
	  "never":[".env","*.pem","private/**"],
	  "commands":[["sh","-c",{"any":true}]],
	  "writes":{"roots":["workspace/src"],"commit":"` + commit + `"` + extra + `}}`
}

// treeDigest is every path beneath dir with its type and content digest.
func treeDigest(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	testutil.Must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			v += " " + hex.EncodeToString(s[:])
		}
		out[rel] = v
		return nil
	}))
	return out
}

func sameTree(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	var diff []string
	for k, v := range before {
		if after[k] != v {
			diff = append(diff, fmt.Sprintf("%s: %q -> %q", k, v, after[k]))
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: new %q", k, v))
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Errorf("%s: the host changed:\n%s", what, strings.Join(diff, "\n"))
	}
}

func sh(h *harness, tool, script string) *api.CallResult {
	h.t.Helper()
	res, _ := h.call(tool, map[string]any{"argv": []string{"sh", "-c", script}})
	return res
}

func changesOf(res *api.CallResult) map[string]api.Change {
	out := map[string]api.Change{}
	for _, c := range res.Changes {
		out[c.Path] = c
	}
	return out
}

// TestChangesetCommitAuto: a command that edits, creates and deletes
// files and makes a directory in its scratch layer; each change is
// decided and committed (commit auto) and the host has exactly them; the
// changeset's record (old and new digests) is in the ledger before the
// call's result, which lists what committed.
func TestChangesetCommitAuto(t *testing.T) {
	base, m := changesetFixture(t, csTool("fmt", "auto", ""))
	h := start(t, m, securefs.ModeAuto)
	src := filepath.Join(base, "workspace/src")
	res := sh(h, "fmt", `echo C > sub/c.txt && echo "print('A')" > a.py && echo new > new.py && rm b.txt && mkdir d && echo x > d/x.txt && chmod +x new.py`)
	if !res.OK || res.Reason != api.ReasonAllowed || res.Committed == nil || !*res.Committed {
		t.Fatalf("result: %+v", res)
	}
	ch := changesOf(res)
	want := map[string]string{"workspace/src/a.py": "modify", "workspace/src/sub/c.txt": "modify", "workspace/src/new.py": "create",
		"workspace/src/b.txt": "delete", "workspace/src/d": "mkdir", "workspace/src/d/x.txt": "create"}
	if len(ch) != len(want) {
		t.Errorf("changes %+v, want %v", res.Changes, want)
	}
	for p, a := range want {
		if c := ch[p]; c.Action != a || !c.Committed {
			t.Errorf("%s: %+v, want %s committed", p, c, a)
		}
	}
	if c := ch["workspace/src/a.py"]; c.OldSHA256 != sha256Of([]byte("print('a')\n")) || c.SHA256 != sha256Of([]byte("print('A')\n")) {
		t.Errorf("a.py digests: %+v", c)
	}
	for p, c := range map[string]string{"a.py": "print('A')\n", "new.py": "new\n", "d/x.txt": "x\n", "sub/c.txt": "C\n", ".env": "SECRET=1\n"} {
		if b, err := os.ReadFile(filepath.Join(src, p)); err != nil || string(b) != c {
			t.Errorf("host %s: %q %v, want %q", p, b, err, c)
		}
	}
	if _, err := os.Lstat(filepath.Join(src, "b.txt")); !os.IsNotExist(err) {
		t.Errorf("b.txt still on the host: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(src, "new.py")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("new.py mode: %v %v, want 0755 (file_mode with x where r)", fi.Mode(), err)
	}
	// The changeset record precedes the result and names every change.
	var kinds []string
	for _, line := range bytes.Split(bytes.TrimSpace(h.ledger()), []byte("\n")) {
		var r audit.Record
		testutil.Must(t, json.Unmarshal(line, &r))
		if r.CallID == res.CallID {
			kinds = append(kinds, r.Kind)
			if r.Kind == audit.KindChangeset && len(r.Changes) != len(want) {
				t.Errorf("changeset record: %+v", r.Changes)
			}
		}
	}
	if strings.Join(kinds, ",") != "decision,changeset,result" {
		t.Errorf("records of the call: %v", kinds)
	}
}

// TestChangesetRefused: a changeset with one change the policy refuses is
// refused whole, and the host keeps every file as it was: a never-listed
// name (as written, by glob, in a never-listed directory), a path outside
// writes.roots, and what is not a plain file or directory (a symlink, a
// FIFO, a hard link, a set-id mode). Each alongside an allowed change.
func TestChangesetRefused(t *testing.T) {
	base, m := changesetFixture(t, csTool("fmt", "auto", ""))
	h := start(t, m, securefs.ModeAuto)
	before := treeDigest(t, base)
	for _, c := range []struct {
		name, script string
		reason       api.Reason
	}{
		{"never .env", `echo x > .env`, api.ReasonNeverListed},
		{"never *.pem", `echo x > new.pem`, api.ReasonNeverListed},
		{"never private/**", `mkdir -p private && echo x > private/q.txt`, api.ReasonNeverListed},
		{"outside writes.roots", `echo x > ../other/o2.txt`, api.ReasonOutsideRoots},
		{"symlink", `ln -s a.py l.py`, api.ReasonInvalidArgs},
		{"fifo", `mkfifo f`, api.ReasonInvalidArgs},
		{"hard link", `ln a.py h.py`, api.ReasonInvalidArgs},
		{"set-uid", `echo x > s && chmod u+s s`, api.ReasonInvalidArgs},
		{"delete a directory holding a never-listed file", `rm -rf keys`, api.ReasonNeverListed},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := sh(h, "fmt", `echo ok > allowed.txt && `+c.script)
			if res.OK || res.Committed == nil || *res.Committed || res.Verdict != api.VerdictAllow {
				t.Fatalf("not refused: %+v", res)
			}
			if c.reason != "" && res.Reason != c.reason {
				t.Errorf("reason %s, want %s (%+v)", res.Reason, c.reason, res.Changes)
			}
			refused := false
			for _, ch := range res.Changes {
				if ch.Committed {
					t.Errorf("%s committed in a refused changeset", ch.Path)
				}
				refused = refused || ch.Reason != ""
			}
			if !refused {
				t.Errorf("no change names why: %+v", res.Changes)
			}
			sameTree(t, c.name, before, treeDigest(t, base))
		})
	}
}

// TestChangesetHostChangedWhileRunning: a file the command modified was
// changed on the host while it ran: the commit is refused
// precondition_failed and the host keeps its version. The test changes
// the file once the command says it wrote, and releases it through a
// read-only mount.
func TestChangesetHostChangedWhileRunning(t *testing.T) {
	base, m := changesetFixture(t, csTool("fmt", "auto", ""))
	h := start(t, m, securefs.ModeAuto)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := filepath.Join(base, "workspace/src/a.py")
	go_ := filepath.Join(base, "sync/go")
	s := startStream(h.c, ctx, api.CallRequest{Tool: "fmt", Stream: true,
		Args: json.RawMessage(`{"argv":["sh","-c","echo mine > a.py && echo ready && while [ ! -e ` + go_ + ` ]; do sleep 0.01; done"]}`)})
	for {
		ev := s.next(t, "ready")
		if ev.Event == api.EventOutput && strings.Contains(ev.Data, "ready") {
			break
		}
	}
	testutil.Must(t, os.WriteFile(a, []byte("theirs\n"), 0o644))
	testutil.Must(t, os.WriteFile(go_, nil, 0o644))
	res := s.wait(t)
	if res.OK || res.Reason != api.ReasonPreconditionFailed || *res.Committed {
		t.Fatalf("result: %+v", res)
	}
	if b, _ := os.ReadFile(a); string(b) != "theirs\n" {
		t.Errorf("host a.py %q, want the host's version", b)
	}
}

// TestChangesetDiscardAndCommitOn: commit discard keeps nothing (the
// changes are listed, none committed); commit_on success drops a failed
// command's writes unread.
func TestChangesetDiscardAndCommitOn(t *testing.T) {
	base, m := changesetFixture(t, csTool("scratch", "discard", "")+","+csTool("fmt", "auto", ""))
	h := start(t, m, securefs.ModeAuto)
	before := treeDigest(t, base)
	res := sh(h, "scratch", `echo x > a.py && echo y > build.o`)
	if !res.OK || res.Committed == nil || *res.Committed || len(res.Changes) != 2 {
		t.Fatalf("discard: %+v", res)
	}
	res = sh(h, "fmt", `echo x > a.py; exit 3`)
	if res.OK || res.ExitCode == nil || *res.ExitCode != 3 || len(res.Changes) != 0 {
		t.Fatalf("failed command: %+v", res)
	}
	sameTree(t, "discard", before, treeDigest(t, base))
}

// TestChangesetKeep: keep chooses what commits; the rest is dropped and
// counted.
func TestChangesetKeep(t *testing.T) {
	base, m := changesetFixture(t, csTool("fmt", "auto", `,"keep":["*.py"]`))
	h := start(t, m, securefs.ModeAuto)
	res := sh(h, "fmt", `echo x > a.py && mkdir -p __pycache__ && echo y > __pycache__/a.pyc && echo z > log.txt`)
	if !res.OK || !*res.Committed || len(res.Changes) != 1 || res.Dropped != 3 {
		t.Fatalf("result: %+v", res)
	}
	if _, err := os.Lstat(filepath.Join(base, "workspace/src/log.txt")); !os.IsNotExist(err) {
		t.Errorf("log.txt committed though keep does not choose it")
	}
}

// TestChangesetScratchFull: a command filling its scratch layer gets
// ENOSPC inside (writes.max_bytes) and the host disk is untouched.
func TestChangesetScratchFull(t *testing.T) {
	base, m := changesetFixture(t, csTool("fmt", "auto", `,"max_bytes":1048576`))
	h := start(t, m, securefs.ModeAuto)
	before := treeDigest(t, base)
	res := sh(h, "fmt", `dd if=/dev/zero of=big bs=65536 count=64 2>&1; echo rc=$?; exit 1`)
	if !strings.Contains(*res.Output, "No space left") {
		t.Errorf("no ENOSPC inside: %+v %q", res, *res.Output)
	}
	sameTree(t, "scratch full", before, treeDigest(t, base))
}

// TestChangesetApproval: commit approval parks the call after it ran; the
// approver sees every change (200 created, 3 deleted, the deletions
// first and each one named, in the API and in `sluice approvals`);
// approving commits; denying discards.
func TestChangesetApproval(t *testing.T) {
	base, m := changesetFixture(t, csTool("fmt", "approval", ""))
	src := filepath.Join(base, "workspace/src")
	for i := 0; i < 3; i++ {
		testutil.Must(t, os.WriteFile(filepath.Join(src, fmt.Sprintf("del%d.txt", i)), []byte("d\n"), 0o644))
	}
	h := start(t, m, securefs.ModeAuto)
	script := `for i in $(seq 1 200); do echo $i > f$i.txt; done; rm del0.txt del1.txt del2.txt`
	run := func(approve bool) *api.CallResult {
		done := make(chan *api.CallResult, 1)
		go func() {
			a, _ := json.Marshal(map[string]any{"argv": []string{"sh", "-c", script}})
			body, _ := json.Marshal(api.CallRequest{Tool: "fmt", Args: a})
			// Another uid than the approver's: nobody approves their own call.
			agent := clientAs(h.socket, agentUID)
			defer agent.Close()
			_, b, err := agent.CallRaw(context.Background(), body)
			var res api.CallResult
			if err == nil {
				err = json.Unmarshal(b, &res)
			}
			if err != nil {
				t.Error(err)
			}
			done <- &res
		}()
		list := waitListed(t, h, 1)
		ch := list[0].Change
		if ch == nil || len(ch.Changes) != 203 {
			t.Fatalf("approval shows %+v", ch)
		}
		for i := 0; i < 3; i++ {
			if c := ch.Changes[i]; c.Action != "delete" || c.Path != fmt.Sprintf("workspace/src/del%d.txt", i) {
				t.Errorf("change %d: %+v, want the deletions first", i, c)
			}
		}
		out, err := exec.Command(sluiceCLI(t), "--socket", h.socket, "approvals").CombinedOutput()
		if err != nil {
			t.Fatalf("sluice approvals: %v\n%s", err, out)
		}
		for i := 0; i < 3; i++ {
			if !strings.Contains(string(out), fmt.Sprintf("DELETE workspace/src/del%d.txt", i)) {
				t.Errorf("sluice approvals does not show the deletion of del%d.txt:\n%s", i, out)
			}
		}
		if n := strings.Count(string(out), "create workspace/src/f"); n != 200 {
			t.Errorf("sluice approvals shows %d creations, want 200", n)
		}
		if _, err := h.c.Decide(context.Background(), list[0].ApprovalID, approve, "test"); err != nil {
			t.Fatal(err)
		}
		return <-done
	}
	before := treeDigest(t, base)
	res := run(false)
	if res.OK || res.Reason != api.ReasonApprovalDenied || *res.Committed {
		t.Fatalf("denied: %+v", res)
	}
	sameTree(t, "denied", before, treeDigest(t, base))
	res = run(true)
	if !res.OK || !*res.Committed {
		t.Fatalf("approved: %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "f200.txt")); string(b) != "200\n" {
		t.Errorf("f200.txt %q", b)
	}
	if _, err := os.Lstat(filepath.Join(src, "del1.txt")); !os.IsNotExist(err) {
		t.Error("del1.txt not deleted")
	}
}

// TestChangesetCrashMidCommit: an allowed changeset record with no result
// (the daemon died mid-commit, as kill -9 leaves it) is reported at the
// next start: a recovered record names which changes are on the host and
// which are not, and the commit's temp file is removed.
func TestChangesetCrashMidCommit(t *testing.T) {
	base, m := changesetFixture(t, csTool("fmt", "auto", ""))
	dir := t.TempDir()
	cfg := Config{Manifest: m, Socket: filepath.Join(dir, "s.sock"), StateDir: filepath.Join(dir, "state"),
		RunDir: filepath.Join(dir, "run"), Helper: testutil.Helper(t), Logger: slog.New(slog.NewJSONHandler(&testutil.LockedBuffer{}, nil))}
	stop := launch(t, cfg)
	h := &harness{t: t, socket: cfg.Socket, stateDir: cfg.StateDir, c: client.New(cfg.Socket)}
	h.c.Close()
	stop()
	src := filepath.Join(base, "workspace/src")
	// The crash: the first change is on the host, the second is not (its
	// temp file is), the third (a deletion) is done.
	testutil.Must(t, os.WriteFile(filepath.Join(src, "one.py"), []byte("1\n"), 0o644))
	id := "c-01CHANGESETCRASHAAAAAAAAAAA"
	temp := filepath.Join(src, recovery.ChangesetTempName(id, 1))
	testutil.Must(t, os.WriteFile(temp, []byte("half"), 0o600))
	testutil.Must(t, os.Remove(filepath.Join(src, "b.txt")))
	l, _, err := audit.Open(filepath.Join(cfg.StateDir, "audit.jsonl"))
	testutil.Must(t, err)
	testutil.Must(t, l.AppendSync(&audit.Record{Kind: audit.KindChangeset, CallID: id, Tool: "fmt", Verdict: api.VerdictAllow,
		Changes: []api.Change{
			{Path: "workspace/src/one.py", Action: "create", Bytes: 2, SHA256: sha256Of([]byte("1\n"))},
			{Path: "workspace/src/two.py", Action: "create", Bytes: 2, SHA256: sha256Of([]byte("2\n"))},
			{Path: "workspace/src/b.txt", Action: "delete", Bytes: 2, SHA256: sha256Of([]byte("b\n"))},
		}}))
	testutil.Must(t, l.Close())
	os.Remove(filepath.Join(cfg.StateDir, recovery.CleanStopFile))
	stop = launch(t, cfg)
	stop()
	if exists(temp) {
		t.Error("recovery left the commit's temp file")
	}
	var rec *audit.Record
	for _, line := range bytes.Split(bytes.TrimSpace(h.ledger()), []byte("\n")) {
		var r audit.Record
		testutil.Must(t, json.Unmarshal(line, &r))
		if r.Kind == audit.KindRecovered && r.CallID == id {
			rec = &r
		}
	}
	if rec == nil || len(rec.Changes) != 3 || !rec.Changes[0].Committed || rec.Changes[1].Committed || !rec.Changes[2].Committed ||
		!strings.Contains(rec.Detail, "2 of 3") {
		t.Fatalf("recovered record: %+v", rec)
	}
}

// TestExecCache: a tool's cache persists across one principal's calls,
// is invisible to another principal's, and `sluice cache clear` drops it.
func TestExecCache(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	testutil.Must(t, os.Chmod(base, 0o755))
	m := writeManifest(t, base, fmt.Sprintf(`{"schema_version":1,
	  "principals":{"ops":{"uids":[0],"approver":true,"tools":["*"]},"agent":{"uids":[%d],"tools":["*"]}},
	  "tools":{"build":{"operation":"execute","commands":[["sh","-c",{"any":true}]],"cache":["/var/cache/build"],"cache_mb":4}}}`, agentUID))
	if err := runRefused(t, m); err != nil {
		if strings.Contains(err.Error(), "caches need Linux 6.3") {
			t.Skipf("SKIP: THIS KERNEL CANNOT BIND CACHES: %v", err)
		}
		t.Fatal(err)
	}
	h := start(t, m, securefs.ModeAuto)
	agent := clientAs(h.socket, agentUID)
	defer agent.Close()
	call := func(c *client.Client, script string) *api.CallResult {
		a, _ := json.Marshal(map[string]any{"argv": []string{"sh", "-c", script}})
		res, err := c.Call(context.Background(), api.CallRequest{Tool: "build", Args: a})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := call(agent, `echo agent > /var/cache/build/x`); !res.OK {
		t.Fatalf("write the cache: %+v", res)
	}
	if res := call(agent, `cat /var/cache/build/x`); !res.OK || *res.Output != "agent\n" {
		t.Fatalf("the cache did not persist: %+v", res)
	}
	if res := call(h.c, `cat /var/cache/build/x`); res.OK {
		t.Fatalf("another principal sees the agent's cache: %+v", res)
	}
	if res := call(agent, `head -c 8388608 /dev/zero 2>&1 >/var/cache/build/big; echo rc=$?`); !strings.Contains(*res.Output, "No space left") {
		t.Errorf("cache_mb is not a cap: %+v %q", res, *res.Output)
	}
	out, err := exec.Command(sluiceCLI(t), "--socket", h.socket, "cache", "clear", "build").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "every principal's") {
		t.Fatalf("sluice cache clear: %v\n%s", err, out)
	}
	if res := call(agent, `cat /var/cache/build/x`); res.OK {
		t.Fatalf("the cache survived a clear: %+v", res)
	}
}
