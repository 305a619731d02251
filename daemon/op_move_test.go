//go:build linux

package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestMoveTable: move over the socket, allowed cases, errors and escapes
// of both ends, and the never rules: a never-listed file is neither made
// visible under a new name nor a visible one hidden, and a directory does
// not carry a never-listed entry out from under a path glob.
func TestMoveTable(t *testing.T) {
	base, h := changeFixture(t)
	ws := filepath.Join(base, "ws")
	write := func(rel, content string) {
		testutil.Must(t, os.MkdirAll(filepath.Dir(filepath.Join(ws, rel)), 0o755))
		testutil.Must(t, os.WriteFile(filepath.Join(ws, rel), []byte(content), 0o644))
	}
	write("a.txt", "a\n")
	write("taken.txt", "taken\n")
	write(".env", "K=v\n")
	write("private/k", "k\n")
	write("proj/main.go", "package main\n")
	write("proj/secret/.env", "S=1\n")
	write("proj/secret/key", "key\n")
	write("plain/x.go", "x\n")
	write("plain/.env", "P=1\n")
	testutil.Must(t, os.Mkdir(filepath.Join(ws, "proj2"), 0o755))
	testutil.Must(t, unix.Mkfifo(filepath.Join(ws, "fifo"), 0o644))
	call := func(args map[string]any) *api.CallResult { r, _ := h.call("move_file", args); return r }
	for _, tc := range []struct {
		name   string
		args   map[string]any
		reason api.Reason
	}{
		{"no to", map[string]any{"path": "ws/a.txt"}, api.ReasonInvalidArgs},
		{"destination exists", map[string]any{"path": "ws/a.txt", "to": "ws/taken.txt"}, api.ReasonPreconditionFailed},
		{"destination is a directory", map[string]any{"path": "ws/a.txt", "to": "ws/proj2"}, api.ReasonPreconditionFailed},
		{"stale if_match", map[string]any{"path": "ws/a.txt", "to": "ws/b.txt", "if_match": sha256Of([]byte("older"))}, api.ReasonPreconditionFailed},
		{"absent source", map[string]any{"path": "ws/none", "to": "ws/b.txt"}, api.ReasonNotFound},
		{"fifo", map[string]any{"path": "ws/fifo", "to": "ws/b.txt"}, api.ReasonUnsupportedFileType},
		{".env to innocent", map[string]any{"path": "ws/.env", "to": "ws/notes.txt"}, api.ReasonNeverListed},
		{"innocent to .env", map[string]any{"path": "ws/a.txt", "to": "ws/proj2/.env"}, api.ReasonNeverListed},
		{"innocent to .ENV (folded)", map[string]any{"path": "ws/a.txt", "to": "ws/.ENV"}, api.ReasonNeverListed},
		{"innocent under private", map[string]any{"path": "ws/a.txt", "to": "ws/private/a.txt"}, api.ReasonNeverListed},
		{"out of private", map[string]any{"path": "ws/private/k", "to": "ws/k"}, api.ReasonNeverListed},
		{"a directory carrying secret/ out from under proj/secret/**", map[string]any{"path": "ws/proj", "to": "ws/elsewhere"}, api.ReasonNeverListed},
		{"a directory into a never-listed path", map[string]any{"path": "ws/plain", "to": "ws/proj/secret/plain"}, api.ReasonNeverListed},
		{"to outside", map[string]any{"path": "ws/a.txt", "to": "outside/a.txt"}, api.ReasonOutsideRoots},
		{"from outside", map[string]any{"path": "outside/keep.txt", "to": "ws/keep.txt"}, api.ReasonOutsideRoots},
		{"to dotdot", map[string]any{"path": "ws/a.txt", "to": "ws/../outside/a.txt"}, api.ReasonOutsideRoots},
		{"from dotdot", map[string]any{"path": "ws/../outside/keep.txt", "to": "ws/keep.txt"}, api.ReasonOutsideRoots},
		{"to absolute", map[string]any{"path": "ws/a.txt", "to": filepath.Join(base, "outside/a.txt")}, api.ReasonInvalidPath},
		{"from absolute", map[string]any{"path": filepath.Join(base, "outside/keep.txt"), "to": "ws/k.txt"}, api.ReasonInvalidPath},
		{"to through a symlink out", map[string]any{"path": "ws/a.txt", "to": "ws/out/a.txt"}, api.ReasonOutsideRoots},
		{"from through a symlink out", map[string]any{"path": "ws/out/keep.txt", "to": "ws/keep.txt"}, api.ReasonOutsideRoots},
		{"into itself", map[string]any{"path": "ws/plain", "to": "ws/plain/sub"}, api.ReasonInvalidArgs},
	} {
		res := call(tc.args)
		if res.Reason != tc.reason || res.OK {
			t.Errorf("%s: %s ok=%v (%s), want %s", tc.name, res.Reason, res.OK, derefOr(res.Output), tc.reason)
		}
	}
	outsideIntact(t, base)
	fileIs(t, filepath.Join(ws, "a.txt"), "a\n")
	fileIs(t, filepath.Join(ws, ".env"), "K=v\n")
	fileIs(t, filepath.Join(ws, "proj/secret/key"), "key\n")
	fileIs(t, filepath.Join(ws, "taken.txt"), "taken\n")

	// Allowed: a file, with if_match (its digest is the result), a
	// directory whose .env stays hidden at its new path, and a symlink
	// out of the root, moved as itself.
	res := call(map[string]any{"path": "ws/a.txt", "to": "ws/b.txt", "if_match": sha256Of([]byte("a\n"))})
	if !res.OK || res.SHA256 != sha256Of([]byte("a\n")) {
		t.Fatalf("move a file: %+v", res)
	}
	fileIs(t, filepath.Join(ws, "b.txt"), "a\n")
	if _, err := os.Lstat(filepath.Join(ws, "a.txt")); !os.IsNotExist(err) {
		t.Fatalf("the source is still there: %v", err)
	}
	if res := call(map[string]any{"path": "ws/plain", "to": "ws/proj2/plain"}); !res.OK {
		t.Fatalf("move a directory whose .env stays hidden: %+v", res)
	}
	fileIs(t, filepath.Join(ws, "proj2/plain/x.go"), "x\n")
	if res := call(map[string]any{"path": "ws/out.txt", "to": "ws/link.txt"}); !res.OK {
		t.Fatalf("move a symlink: %+v", res)
	}
	if l, err := os.Readlink(filepath.Join(ws, "link.txt")); err != nil || l != "../outside/keep.txt" {
		t.Fatalf("the symlink moved as: %q %v", l, err)
	}
	outsideIntact(t, base)
	// Two targets, recorded by name.
	if l := string(h.ledger()); !strings.Contains(l, `"resolved":{"path":[`) || !strings.Contains(l, `"to":[`) {
		t.Fatalf("a move's decision records its two targets by name")
	}
}

// TestMoveSwapRace: the destination's and the source's parent directory
// is swapped for a symlink to outside in a loop (RENAME_EXCHANGE) while
// moves run into it and out of it; nothing ever lands outside and nothing
// is taken from outside. The race must really have run: swaps happened
// during moves, and moves went both ways (some done, some refused).
func TestMoveSwapRace(t *testing.T) {
	base, h := changeFixture(t)
	ws := filepath.Join(base, "ws")
	outside := filepath.Join(base, "outside")
	dir := filepath.Join(ws, "target")
	testutil.Must(t, os.MkdirAll(dir, 0o755))
	testutil.Must(t, os.MkdirAll(filepath.Join(ws, "from"), 0o755))
	testutil.Must(t, os.Symlink("../outside", filepath.Join(ws, "swap")))
	for i := 0; i < 150; i++ {
		testutil.Must(t, os.WriteFile(filepath.Join(ws, "from", fmt.Sprint("f", i)), []byte("in\n"), 0o644))
		// A name the outbound moves would take if they followed the swap.
		testutil.Must(t, os.WriteFile(filepath.Join(dir, fmt.Sprint("g", i)), []byte("in\n"), 0o644))
	}
	for i := 0; i < 150; i++ {
		testutil.Must(t, os.WriteFile(filepath.Join(outside, fmt.Sprint("g", i)), []byte("out\n"), 0o644))
	}
	before, err := os.ReadDir(outside)
	testutil.Must(t, err)
	sw := testutil.Swap(t, func(int) error {
		return unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, filepath.Join(ws, "swap"), unix.RENAME_EXCHANGE)
	})
	done, refused, overlapped := 0, 0, 0
	reasons := map[api.Reason]int{}
	for i := 0; i < 150; i++ {
		for _, args := range []map[string]any{
			{"path": fmt.Sprint("ws/from/f", i), "to": fmt.Sprint("ws/target/f", i)},
			{"path": fmt.Sprint("ws/target/g", i), "to": fmt.Sprint("ws/from/g", i)},
		} {
			n := sw.Swaps()
			res, _ := h.call("move_file", args)
			if sw.Swaps() != n {
				overlapped++
			}
			if res.OK {
				done++
				continue
			}
			refused++
			reasons[res.Reason]++
			switch res.Reason {
			case api.ReasonOutsideRoots, api.ReasonNotFound, api.ReasonPreconditionFailed:
			default:
				t.Errorf("move %v refused %s, want outside_roots, not_found or precondition_failed", args, res.Reason)
			}
		}
	}
	if err := sw.Stop(); err != nil {
		t.Fatalf("swap: %v", err)
	}
	after, err := os.ReadDir(outside)
	testutil.Must(t, err)
	if len(after) != len(before) {
		t.Fatalf("a move changed what is outside the root: %d entries, was %d", len(after), len(before))
	}
	for _, e := range after {
		if b, err := os.ReadFile(filepath.Join(outside, e.Name())); err != nil || (e.Name() != "keep.txt" && string(b) != "out\n") {
			t.Fatalf("outside/%s: %q %v", e.Name(), b, err)
		}
	}
	// Whatever moved in from/ came from the root.
	ents, err := os.ReadDir(filepath.Join(ws, "from"))
	testutil.Must(t, err)
	for _, e := range ents {
		if b, _ := os.ReadFile(filepath.Join(ws, "from", e.Name())); string(b) != "in\n" {
			t.Fatalf("from/%s came from outside: %q", e.Name(), b)
		}
	}
	t.Logf("%d swaps, %d moves overlapped a swap, %d done, %d refused %v", sw.Swaps(), overlapped, done, refused, reasons)
	if sw.Swaps() == 0 || overlapped == 0 {
		t.Fatalf("the race was not exercised: %d swaps, %d during a move", sw.Swaps(), overlapped)
	}
	if done == 0 || refused == 0 {
		t.Fatalf("the race never went both ways: %d done, %d refused", done, refused)
	}
}

// TestMoveParentMovedSinceDecision: another process renames a move's
// source or destination directory into a never-listed place between the
// decision and the rename (here from the hook, under the move's locks).
// The move is refused (precondition_failed): each end must still be the
// path that was checked against never, or a file under private/ would
// come out visible, or a visible one go in hidden.
func TestMoveParentMovedSinceDecision(t *testing.T) {
	base, h := changeFixture(t)
	ws := filepath.Join(base, "ws")
	testutil.Must(t, os.MkdirAll(filepath.Join(ws, "private"), 0o755))
	for _, d := range []string{"s", "d"} {
		testutil.Must(t, os.MkdirAll(filepath.Join(ws, d), 0o755))
	}
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "s/k"), []byte("k\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("a\n"), 0o644))
	t.Cleanup(func() { testHookBeforeCommit = nil })

	// The source's directory goes under private/: moving k out would
	// make a never-listed file visible.
	testHookBeforeCommit = func(*call) {
		testutil.Must(t, os.Rename(filepath.Join(ws, "s"), filepath.Join(ws, "private/s")))
	}
	if res, _ := h.call("move_file", map[string]any{"path": "ws/s/k", "to": "ws/k"}); res.OK || res.Reason != api.ReasonPreconditionFailed {
		t.Fatalf("source's parent moved under private/: %+v", res)
	}
	fileIs(t, filepath.Join(ws, "private/s/k"), "k\n")
	if _, err := os.Lstat(filepath.Join(ws, "k")); !os.IsNotExist(err) {
		t.Fatalf("a never-listed file came out: %v", err)
	}

	// The destination's directory goes under private/: a.txt would hide.
	testHookBeforeCommit = func(*call) {
		testutil.Must(t, os.Rename(filepath.Join(ws, "d"), filepath.Join(ws, "private/d")))
	}
	if res, _ := h.call("move_file", map[string]any{"path": "ws/a.txt", "to": "ws/d/a.txt"}); res.OK || res.Reason != api.ReasonPreconditionFailed {
		t.Fatalf("destination's parent moved under private/: %+v", res)
	}
	fileIs(t, filepath.Join(ws, "a.txt"), "a\n")
}

// TestEscapeTableChangingOps runs the one escape table's refused paths
// (outside_roots, never_listed, invalid_path for a read) through edit, a
// move's source and its destination, and mkdir: each is refused, no
// response carries a secret, and nothing outside the roots nor any
// never-listed file changes.
func TestEscapeTableChangingOps(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	never := `"roots":["workspace/src","workspace/tests"],"never":[".env","*.pem","private/**"]`
	m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{
	  "edit_file":{"operation":"edit",`+never+`},
	  "move_file":{"operation":"move",`+never+`},
	  "make_dir":{"operation":"mkdir",`+never+`}}}`)
	h := start(t, m, securefs.ModeAuto)
	before := snapshotOutside(t, fx.Base)
	n, links := 0, 0
	for _, c := range escapetest.Cases {
		switch c.Want {
		case api.ReasonOutsideRoots, api.ReasonNeverListed, api.ReasonInvalidPath:
		default:
			continue
		}
		p := fx.PathFor(c)
		n++
		moved := fmt.Sprint("workspace/src/moved", n)
		fi, lerr := os.Lstat(filepath.Join(fx.Base, p))
		isLink := lerr == nil && fi.Mode()&os.ModeSymlink != 0 && !filepath.IsAbs(p)
		for _, call := range []struct {
			tool string
			args map[string]any
		}{
			{"edit_file", map[string]any{"path": p, "edits": []anEdit{{OldText: escapetest.Secret, NewText: "gone"}}}},
			{"move_file", map[string]any{"path": "workspace/src/sub/b.txt", "to": p}},
			{"make_dir", map[string]any{"path": p}},
			{"make_dir", map[string]any{"path": p + "/x", "parents": true}},
			{"move_file", map[string]any{"path": p, "to": moved}},
		} {
			res, body := h.call(call.tool, call.args)
			if strings.Contains(string(body), escapetest.Secret) {
				t.Errorf("%s: ESCAPE: %s's response carries a secret: %s", c.Name, call.tool, body)
			}
			if !res.OK && res.Reason != api.ReasonAllowed {
				continue
			}
			// A symlink in the final place moves as itself, never
			// followed (as a delete removes the link itself): what it
			// points to stays where it is, and reading through it at its
			// new name is decided there. Put it back for the next cases.
			if isLink && call.args["to"] == moved {
				l1, _ := os.Readlink(filepath.Join(fx.Base, moved))
				l0, _ := os.Readlink(filepath.Join(fx.Base, p))
				if l1 == "" || l0 != "" {
					t.Errorf("%s: the symlink did not move as itself: %q %q", c.Name, l1, l0)
				}
				testutil.Must(t, os.Rename(filepath.Join(fx.Base, moved), filepath.Join(fx.Base, p)))
				links++
				continue
			}
			t.Errorf("%s: %s %v was allowed: %s", c.Name, call.tool, call.args, body)
		}
	}
	t.Logf("%d refused cases, each through 5 calls; %d final-name symlinks moved as themselves", n, links)
	if n < 30 {
		t.Fatalf("only %d refused cases in the table", n)
	}
	fileIs(t, filepath.Join(fx.Base, "workspace/src/sub/b.txt"), "b\n")
	after := snapshotOutside(t, fx.Base)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("outside the roots or a never-listed file changed:\nbefore %v\nafter  %v", before, after)
	}
	if l := h.ledger(); strings.Contains(string(l), escapetest.Secret) {
		t.Fatal("a secret reached the audit ledger")
	}
}

// snapshotOutside records every name beneath base, with its content or
// link target, except what lies beneath the escape fixture's roots and
// is not never-listed there (those a legitimate call may change).
func snapshotOutside(t *testing.T, base string) map[string]string {
	t.Helper()
	out := map[string]string{}
	testutil.Must(t, filepath.Walk(base, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		inRoot := strings.HasPrefix(rel, "workspace/src/") || strings.HasPrefix(rel, "workspace/tests/")
		hidden := strings.Contains(rel, ".env") || strings.HasSuffix(rel, ".pem") || strings.Contains(rel, "/private")
		if inRoot && !hidden || rel == "manifest.json" {
			return nil
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "-> " + l
		case fi.Mode().IsRegular() && fi.Size() < 1<<20:
			b, _ := os.ReadFile(p)
			out[rel] = string(b)
		default:
			out[rel] = fi.Mode().String()
		}
		return nil
	}))
	return out
}
