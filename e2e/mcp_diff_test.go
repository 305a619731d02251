//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testutil"
)

// mcpDiffTools are the manifest's file tools, by operation. Those marked
// placeholder are offered only when sluiced knows their operation: each is
// added by a reload of its own, and a reload refused because of the
// row's operation leaves it out (loudly), so the test picks up each
// operation once it exists. Names are the official filesystem server's
// where it has the same tool.
var mcpDiffTools = []struct {
	op, name    string
	placeholder bool
}{
	{"read", "read_file", false},
	{"list", "list_dir", false},
	{"write", "write_file", false},
	{"delete", "delete_file", false},
	{"edit", "edit_file", true},
	{"move", "move_file", true},
	{"mkdir", "create_directory", true},
	{"stat", "get_file_info", true},
	{"search", "search_files", true},
}

// mcpDiffSecret is the never-listed .env's content: no sluice result may
// carry it.
const mcpDiffSecret = "TOKEN=hunter2"

func mcpDiffManifest(base string, ops []string) string {
	var rows []string
	for _, tl := range mcpDiffTools {
		if slices.Contains(ops, tl.op) {
			rows = append(rows, fmt.Sprintf(`%q:{"operation":%q,"roots":["ws"],"never":[".env","*.pem"]}`, tl.name, tl.op))
		}
	}
	return `{"schema_version":1,"base":"` + base + `","tools":{` + strings.Join(rows, ",") + `}}`
}

// mcpDiffWorkspace builds one copy: parent/ws is the workspace, and
// parent/secret.txt lies outside it, reached by ../ and by the symlink
// ws/src/out.
func mcpDiffWorkspace(t *testing.T, parent string) {
	t.Helper()
	files := []struct {
		path, body string
		mode       fs.FileMode
	}{
		{"secret.txt", "outside secret\n", 0o644},
		{"ws/src/main.py", "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n", 0o644},
		{"ws/src/util.py", "X = 1\n", 0o644},
		{"ws/src/.env", mcpDiffSecret + "\n", 0o600},
		{"ws/docs/guide.md", "# Guide\n\nSome words.\n", 0o644},
		{"ws/docs/tail.txt", "one\ntwo\nthree\nfour", 0o644},
		{"ws/notes.txt", "private notes\n", 0o600},
	}
	for _, f := range files {
		p := filepath.Join(parent, f.path)
		testutil.Must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		testutil.Must(t, os.WriteFile(p, []byte(f.body), f.mode))
		testutil.Must(t, os.Chmod(p, f.mode))
	}
	testutil.Must(t, os.Symlink("../../secret.txt", filepath.Join(parent, "ws/src/out")))
	testutil.Must(t, os.Symlink("guide.md", filepath.Join(parent, "ws/docs/latest")))
}

// diffEntry is one path of a tree as the comparison sees it: its kind,
// its permission bits, and a regular file's content or a symlink's target.
type diffEntry struct {
	Kind string
	Mode fs.FileMode
	Data string
}

func diffTree(t *testing.T, root string) map[string]diffEntry {
	t.Helper()
	out := map[string]diffEntry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := diffEntry{Mode: info.Mode().Perm()}
		switch {
		case info.Mode().IsRegular():
			e.Kind = "file"
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.Data = string(b)
		case info.IsDir():
			e.Kind = "dir"
		case info.Mode()&fs.ModeSymlink != 0:
			e.Kind, e.Mode = "symlink", 0 // a symlink's own bits mean nothing on Linux
			e.Data, err = os.Readlink(p)
			if err != nil {
				return err
			}
		default:
			e.Kind = info.Mode().Type().String()
		}
		out[rel] = e
		return nil
	})
	testutil.Must(t, err)
	return out
}

type diffStep struct {
	ID           string          `json:"id"`
	Op           string          `json:"op"`
	Expect       json.RawMessage `json:"expect"`
	SluiceReason string          `json:"sluice_reason"`
	Hidden       []string        `json:"hidden"`
	TreeDiffers  []string        `json:"tree_differs"`
}

// expected is the outcome class each side must have.
func (s diffStep) expected(t *testing.T) (peer, sl string) {
	var both string
	if json.Unmarshal(s.Expect, &both) == nil {
		return both, both
	}
	var m struct{ Peer, Sluice string }
	if err := json.Unmarshal(s.Expect, &m); err != nil || m.Peer == "" || m.Sluice == "" {
		t.Fatalf("session step %q: expect %s: want a class or {peer, sluice}", s.ID, s.Expect)
	}
	return m.Peer, m.Sluice
}

type diffOutcome struct {
	Class    string          `json:"class"`
	Reason   string          `json:"reason"`
	Tool     string          `json:"tool"`
	Host     bool            `json:"host"`
	Detail   string          `json:"detail"`
	Observed json.RawMessage `json:"observed"`
	Unparsed string          `json:"unparsed"`
}

type diffLine struct {
	Tools   map[string][]string `json:"tools"`
	Stderr  map[string]string   `json:"stderr"`
	Step    string              `json:"step"`
	Op      string              `json:"op"`
	Skipped string              `json:"skipped"`
	Peer    *diffOutcome        `json:"peer"`
	Sluice  *diffOutcome        `json:"sluice"`
}

// TestMCPDiffFilesystemServer: one session of file operations (read,
// list, write, edit, move, mkdir, stat, search, delete, and denied
// attempts: ../ escapes, absolute paths, a symlink out, a never-listed
// .env) through the official MCP filesystem server and through `sluice
// mcp`, both driven by e2e/mcp/diff.mjs on the official TypeScript SDK,
// each on its own copy of one workspace. Every step's outcome class must
// be the one testdata/mcpdiff/session.json expects on each side (the same
// on both, except where sluice's policy refuses what the peer allows, step
// by step), sluice's reason code where the step names one, and what reads,
// listings, stats and searches return must agree (less what sluice must
// hide). Then the two final trees, the files outside the workspaces
// included, must be equal in paths, kinds, contents, symlink targets and
// permission bits, except the paths the steps that ran say must differ.
// Operations sluice does not offer yet are skipped on both sides, loudly.
func TestMCPDiffFilesystemServer(t *testing.T) {
	testutil.RequireRoot(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("SKIPPED LOUDLY: node is not installed, so the differential MCP test cannot run (scripts/deps.sh installs node and npm)")
	}
	dir, _ := filepath.Abs("mcp")
	fsServer := filepath.Join(dir, "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
	if _, err := os.Stat(fsServer); err != nil {
		cmd := exec.Command("npm", "ci", "--prefer-offline", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in e2e/mcp (the pinned SDK and filesystem server): %v\n%s", err, out)
		}
	}
	sessionFile, _ := filepath.Abs("testdata/mcpdiff/session.json")
	b, err := os.ReadFile(sessionFile)
	testutil.Must(t, err)
	var session struct{ Steps []diffStep }
	testutil.Must(t, json.Unmarshal(b, &session))

	tmp := t.TempDir()
	os.Chmod(tmp, 0o755)
	peerDir, sluiceDir := filepath.Join(tmp, "peer"), filepath.Join(tmp, "sluice")
	mcpDiffWorkspace(t, peerDir)
	mcpDiffWorkspace(t, sluiceDir)
	if a, b := diffTree(t, peerDir), diffTree(t, sluiceDir); !reflect.DeepEqual(a, b) {
		t.Fatalf("the two copies differ before the session:\n%v\n%v", a, b)
	}

	// The manifest with the core tools, then each placeholder by a reload.
	var ops []string
	for _, tl := range mcpDiffTools {
		if !tl.placeholder {
			ops = append(ops, tl.op)
		}
	}
	mdir := t.TempDir()
	m := writeFile(t, mdir, "manifest.json", mcpDiffManifest(sluiceDir, ops))
	d := startOwnDaemon(t, m)
	for _, tl := range mcpDiffTools {
		if !tl.placeholder {
			continue
		}
		writeFile(t, mdir, "manifest.json", mcpDiffManifest(sluiceDir, append(slices.Clone(ops), tl.op)))
		_, stderr, code := sluice(t, d.socket, "reload")
		switch {
		case code == 0:
			ops = append(ops, tl.op)
		case strings.Contains(stderr, "tools."+tl.name+".operation"):
			t.Logf("SKIPPED: sluiced has no %q operation yet (reload: %s); the %s steps are skipped on both sides",
				tl.op, strings.TrimSpace(stderr), tl.op)
		default:
			t.Errorf("reload with the %s row refused for another reason than its operation: %d %s", tl.op, code, stderr)
		}
		writeFile(t, mdir, "manifest.json", mcpDiffManifest(sluiceDir, ops))
	}
	t.Logf("sluice serves operations %v", ops)

	toolNames := map[string]string{}
	for _, tl := range mcpDiffTools {
		toolNames[tl.op] = tl.name
	}
	type side struct {
		Name    string            `json:"name"`
		Kind    string            `json:"kind"`
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		WS      string            `json:"ws"`
		Parent  string            `json:"parent"`
		Prefix  string            `json:"prefix"`
		Tools   map[string]string `json:"tools,omitempty"`
	}
	cfg := map[string]any{"session": sessionFile, "sides": []side{
		// The peer's new files and directories get 0666 and 0777 less its
		// umask, sluice's 0644 (file_mode) whatever the umask: the peer runs
		// under 022, whatever the test's is.
		{Name: "peer", Kind: "filesystem", Command: "/bin/sh",
			Args: []string{"-c", `umask 022 && exec "$0" "$@"`, node, fsServer, filepath.Join(peerDir, "ws")},
			WS:   filepath.Join(peerDir, "ws"), Parent: peerDir, Prefix: filepath.Join(peerDir, "ws") + "/"},
		{Name: "sluice", Kind: "sluice", Command: filepath.Join(binDir, "sluice"), Args: []string{"mcp", "--socket", d.socket},
			WS: filepath.Join(sluiceDir, "ws"), Parent: sluiceDir, Prefix: "ws/", Tools: toolNames},
	}}
	cb, _ := json.Marshal(cfg)
	cfgFile := writeFile(t, mdir, "diff.json", string(cb))

	cmd := exec.Command(node, filepath.Join(dir, "diff.mjs"), cfgFile)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("diff.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, out, &stderr)
	}
	byID := map[string]diffStep{}
	for _, s := range session.Steps {
		byID[s.ID] = s
	}
	var order []string
	differ := map[string]string{} // workspace path → the step that may change it on one side only
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	ran, skipped := 0, 0
	for sc.Scan() {
		var l diffLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("diff.mjs printed %q: %v", sc.Text(), err)
		}
		switch {
		case l.Tools != nil:
			t.Logf("tools: %v", l.Tools)
			continue
		case l.Stderr != nil:
			if s := l.Stderr["sluice"]; strings.Contains(s, "hunter2") {
				t.Errorf("the never-listed .env's content reached sluice mcp's stderr: %s", s)
			}
			continue
		}
		st, ok := byID[l.Step]
		if !ok {
			t.Fatalf("diff.mjs reported unknown step %q", l.Step)
		}
		order = append(order, l.Step)
		if l.Skipped != "" {
			skipped++
			t.Logf("SKIPPED %-28s %s", l.Step, l.Skipped)
			continue
		}
		ran++
		for _, p := range st.TreeDiffers {
			differ[p] = st.ID
		}
		wantPeer, wantSluice := st.expected(t)
		if l.Peer == nil || l.Sluice == nil {
			t.Errorf("%s: a side is missing: %s", st.ID, sc.Text())
			continue
		}
		t.Logf("%-28s peer %-9s sluice %-9s %s", st.ID, l.Peer.Class, l.Sluice.Class, l.Sluice.Reason)
		if l.Peer.Class != wantPeer {
			t.Errorf("%s: the filesystem server's outcome is %s, want %s (%s via %s)", st.ID, l.Peer.Class, wantPeer, l.Peer.Detail, l.Peer.Tool)
		}
		if l.Sluice.Class != wantSluice {
			t.Errorf("%s: sluice's outcome is %s (%s), want %s (%s via %s)", st.ID, l.Sluice.Class, l.Sluice.Reason, wantSluice, l.Sluice.Detail, l.Sluice.Tool)
		}
		if st.SluiceReason != "" && l.Sluice.Reason != st.SluiceReason {
			t.Errorf("%s: sluice's reason is %q, want %q", st.ID, l.Sluice.Reason, st.SluiceReason)
		}
		if strings.Contains(l.Sluice.Detail+string(l.Sluice.Observed), "hunter2") {
			t.Errorf("%s: the never-listed .env's content reached sluice's result: %s", st.ID, sc.Text())
		}
		if l.Peer.Class == "ok" && l.Sluice.Class == "ok" {
			if l.Peer.Unparsed != "" || l.Sluice.Unparsed != "" {
				t.Errorf("%s: a result the test cannot read: peer %q sluice %q", st.ID, l.Peer.Unparsed, l.Sluice.Unparsed)
				continue
			}
			if err := diffObserved(l.Peer.Observed, l.Sluice.Observed, st.Hidden); err != nil {
				t.Errorf("%s: %v", st.ID, err)
			}
		}
	}
	var want []string
	for _, s := range session.Steps {
		want = append(want, s.ID)
	}
	if !slices.Equal(order, want) {
		t.Fatalf("diff.mjs reported steps %q, want %q\nstderr:\n%s", order, want, &stderr)
	}
	t.Logf("%d steps ran on both sides, %d skipped", ran, skipped)

	// The trees, each copy's parent included: nothing outside changed.
	pt, st := diffTree(t, peerDir), diffTree(t, sluiceDir)
	var paths []string
	for p := range pt {
		paths = append(paths, p)
	}
	for p := range st {
		if _, ok := pt[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	mustDiffer := map[string]bool{}
	for p := range differ {
		mustDiffer[filepath.Join("ws", p)] = true
	}
	for _, p := range paths {
		a, aok := pt[p]
		b, bok := st[p]
		same := aok == bok && a == b
		switch {
		case mustDiffer[p] && same:
			t.Errorf("%s: the same on both sides, but step %q (denied by sluice, done by the peer) should have left them different",
				p, differ[strings.TrimPrefix(p, "ws/")])
		case mustDiffer[p]:
			t.Logf("differs as expected: %s: peer %s sluice %s", p, describeDiff(a, aok), describeDiff(b, bok))
		case !same:
			t.Errorf("%s: peer %s, sluice %s", p, describeDiff(a, aok), describeDiff(b, bok))
		}
	}
	if e, ok := st["ws/src/.env"]; !ok || e.Data != mcpDiffSecret+"\n" {
		t.Errorf("sluice's .env changed: %+v %v", e, ok)
	}
	d.stop()
	if out, _, code := sluice(t, d.socket, "audit", "verify", d.ledger()); code != 0 {
		t.Errorf("audit verify: %d %s", code, out)
	}
	if b, _ := os.ReadFile(d.ledger()); bytes.Contains(b, []byte("hunter2")) {
		t.Error("the never-listed .env's content reached the ledger")
	}
}

func describeDiff(e diffEntry, ok bool) string {
	if !ok {
		return "absent"
	}
	data := e.Data
	if len(data) > 60 {
		data = data[:60] + "…"
	}
	return fmt.Sprintf("%s %04o %q", e.Kind, e.Mode, data)
}

// diffObserved compares what a read, list, stat or search returned on the
// two sides: sluice's must equal the peer's less the entries the step
// says sluice hides (a list, and a search: peer entries only; an entry
// sluice shows that the peer does not is an error).
func diffObserved(peer, sl json.RawMessage, hidden []string) error {
	none := func(r json.RawMessage) bool { return len(r) == 0 || string(r) == "null" }
	if none(peer) && none(sl) {
		return nil // a write, a delete, …: the trees are compared at the end
	}
	var p, s any
	if err := json.Unmarshal(peer, &p); err != nil {
		return fmt.Errorf("peer observed %s: %v", peer, err)
	}
	if err := json.Unmarshal(sl, &s); err != nil {
		return fmt.Errorf("sluice observed %s: %v", sl, err)
	}
	if pl, ok := p.([]any); ok && len(hidden) > 0 {
		var kept []any
		for _, e := range pl {
			if str, ok := e.(string); !ok || !slices.Contains(hidden, str) {
				kept = append(kept, e)
			}
		}
		if kept == nil {
			kept = []any{}
		}
		p = kept
	}
	if !reflect.DeepEqual(p, s) {
		return fmt.Errorf("results differ:\n  peer   %s (less %q)\n  sluice %s", peer, hidden, sl)
	}
	return nil
}
