//go:build linux

package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func writeFixture(t *testing.T) (*escapetest.Fixture, *harness) {
	t.Helper()
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{
	  "write_file":{"operation":"write","roots":["workspace/src"],"never":[".env","*.pem","private/**"],"max_bytes":1024},
	  "create_only":{"operation":"write","roots":["workspace/src"],"mode":"create","file_mode":"0600"},
	  "delete_file":{"operation":"delete","roots":["workspace/src"],"never":[".env","*.pem","private/**"]}}}`)
	return fx, start(t, m, securefs.ModeAuto)
}

func (h *harness) write(args map[string]any) *api.CallResult {
	h.t.Helper()
	res, _ := h.call("write_file", args)
	return res
}

func TestWrites(t *testing.T) {
	fx, h := writeFixture(t)
	src := filepath.Join(fx.Base, "workspace/src")
	read := func(name string) string { b, _ := os.ReadFile(filepath.Join(src, name)); return string(b) }

	res := h.write(map[string]any{"path": "workspace/src/new.txt", "content": "one"})
	if !res.OK || res.Reason != api.ReasonAllowed || res.SHA256 != digest("one") || read("new.txt") != "one" {
		t.Fatalf("create: %+v", res)
	}
	if fi, _ := os.Stat(filepath.Join(src, "new.txt")); fi.Mode().Perm() != 0o644 {
		t.Errorf("new file mode %v, want 0644", fi.Mode().Perm())
	}
	// Chain if_match with the digest the last write returned.
	res = h.write(map[string]any{"path": "workspace/src/new.txt", "content": "two", "if_match": res.SHA256})
	if !res.OK || read("new.txt") != "two" {
		t.Fatalf("overwrite with the right if_match: %+v", res)
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		want api.Reason
	}{
		{"if_match wrong", map[string]any{"path": "workspace/src/new.txt", "content": "x", "if_match": digest("one")}, api.ReasonPreconditionFailed},
		{"if_match absent on an existing file", map[string]any{"path": "workspace/src/new.txt", "content": "x", "if_match": "absent"}, api.ReasonPreconditionFailed},
		{"mode create on an existing file", map[string]any{"path": "workspace/src/new.txt", "content": "x", "mode": "create"}, api.ReasonPreconditionFailed},
		{"mode overwrite on a missing file", map[string]any{"path": "workspace/src/missing.txt", "content": "x", "mode": "overwrite"}, api.ReasonPreconditionFailed},
		{"a symlink as the final name", map[string]any{"path": "workspace/src/abs_out", "content": "x"}, api.ReasonUnsupportedFileType},
		{"a symlink inside the root", map[string]any{"path": "workspace/src/in_link", "content": "x"}, api.ReasonUnsupportedFileType},
		{"a directory", map[string]any{"path": "workspace/src/sub", "content": "x"}, api.ReasonNotAFile},
		{"never", map[string]any{"path": "workspace/src/.env", "content": "x"}, api.ReasonNeverListed},
		{"never by glob", map[string]any{"path": "workspace/src/sub/k.pem", "content": "x"}, api.ReasonNeverListed},
		{"never dir", map[string]any{"path": "workspace/src/private/new", "content": "x"}, api.ReasonNeverListed},
		{"a hard link to a never-listed file", map[string]any{"path": "workspace/src/innocent.txt", "content": "x"}, api.ReasonUnsupportedFileType},
		{"outside", map[string]any{"path": "workspace/secret.txt", "content": "x"}, api.ReasonOutsideRoots},
		{"through a symlinked dir out", map[string]any{"path": "workspace/src/dir_out/x.txt", "content": "x"}, api.ReasonOutsideRoots},
		{"missing parent", map[string]any{"path": "workspace/src/nope/x.txt", "content": "x"}, api.ReasonNotFound},
		{"oversize", map[string]any{"path": "workspace/src/big.txt", "content": strings.Repeat("x", 1025)}, api.ReasonLimitExceeded},
		{"the temp prefix", map[string]any{"path": "workspace/src/.sluice-tmp-x", "content": "x"}, api.ReasonInvalidPath},
	} {
		res := h.write(tc.args)
		if res.OK || res.Reason != tc.want {
			t.Errorf("%s: %s ok=%v, want %s", tc.name, res.Reason, res.OK, tc.want)
		}
	}
	if read("new.txt") != "two" {
		t.Fatalf("a refused write changed the file: %q", read("new.txt"))
	}
	if b, _ := os.ReadFile(filepath.Join(fx.Base, "secret.txt")); !strings.HasPrefix(string(b), escapetest.Secret) {
		t.Fatal("the symlink's target changed")
	}
	// content_b64, and mode create with the tool's file_mode.
	res, _ = h.call("create_only", map[string]any{"path": "workspace/src/b64.bin", "content_b64": "AAEC"})
	if !res.OK || read("b64.bin") != "\x00\x01\x02" {
		t.Fatalf("content_b64: %+v", res)
	}
	if fi, _ := os.Stat(filepath.Join(src, "b64.bin")); fi.Mode().Perm() != 0o600 {
		t.Errorf("file_mode: %v", fi.Mode().Perm())
	}
	if res, _ := h.call("create_only", map[string]any{"path": "workspace/src/b64.bin", "content": "x", "mode": "overwrite"}); res.Reason != api.ReasonInvalidArgs {
		t.Errorf("a mode the tool does not allow: %s", res.Reason)
	}
	// The ledger has digests and lengths, never the body.
	led := string(h.ledger())
	if strings.Contains(led, `"two"`) || !strings.Contains(led, `"content_sha256":"`+digest("two")+`"`) {
		t.Error("the ledger holds a body or lacks its digest")
	}
	leftTemps(t, src)
}

func leftTemps(t *testing.T, dir string) {
	t.Helper()
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.HasPrefix(fi.Name(), ".sluice-tmp-") {
			t.Errorf("a temp file is left: %s", p)
		}
		return nil
	})
}

// TestConcurrentWritersOneWins: 16 writers with the same if_match; exactly
// one commits.
func TestConcurrentWritersOneWins(t *testing.T) {
	fx, h := writeFixture(t)
	testutil.Must(t, os.WriteFile(filepath.Join(fx.Base, "workspace/src/shared.txt"), []byte("base"), 0o644))
	var wg sync.WaitGroup
	var won, lost atomic.Int32
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := h.c.Call(context.Background(), api.CallRequest{Tool: "write_file",
				Args: mustJSON(map[string]any{"path": "workspace/src/shared.txt", "content": strings.Repeat("w", i+1), "if_match": digest("base")})})
			switch {
			case err != nil:
				t.Error(err)
			case res.OK:
				won.Add(1)
			case res.Reason == api.ReasonPreconditionFailed:
				lost.Add(1)
			default:
				t.Errorf("writer %d: %s", i, res.Reason)
			}
		}(i)
	}
	wg.Wait()
	if won.Load() != 1 || lost.Load() != 15 {
		t.Fatalf("%d won, %d got precondition_failed; want 1 and 15", won.Load(), lost.Load())
	}
}

// TestWriteParentSwapRace: the parent directory is swapped for a symlink
// to outside in a loop (RENAME_EXCHANGE) while writes run; nothing ever
// lands outside. The race must really have run: every swap succeeded,
// swaps happened during writes, and writes went both ways (some landed in
// the real directory, some were refused because "target" was the link, or
// because it moved between the decision and the commit).
func TestWriteParentSwapRace(t *testing.T) {
	fx, h := writeFixture(t)
	outside := filepath.Join(fx.Base, "outside")
	testutil.Must(t, os.MkdirAll(outside, 0o755))
	keep := filepath.Join(outside, "keep.txt")
	testutil.Must(t, os.WriteFile(keep, []byte("keep me\n"), 0o644))
	dir := filepath.Join(fx.Base, "workspace/src/target")
	testutil.Must(t, os.MkdirAll(dir, 0o755))
	swap := filepath.Join(fx.Base, "workspace/src/swap")
	testutil.Must(t, os.Symlink(outside, swap))
	sw := testutil.Swap(t, func(int) error {
		return unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE)
	})
	landed, refused, overlapped := 0, 0, 0
	reasons := map[api.Reason]int{}
	for i := 0; i < 300; i++ {
		before := sw.Swaps()
		res := h.write(map[string]any{"path": "workspace/src/target/f.txt", "content": "x"})
		if sw.Swaps() != before {
			overlapped++
		}
		if res.OK {
			landed++
		} else {
			refused++
			reasons[res.Reason]++
			// precondition_failed: the parent moved between the decision
			// and the commit (the temp name's place is in the decision).
			if res.Reason != api.ReasonOutsideRoots && res.Reason != api.ReasonNotFound && res.Reason != api.ReasonPreconditionFailed {
				t.Errorf("write %d refused %s, want outside_roots (target was the link) or precondition_failed (it moved)", i, res.Reason)
			}
		}
	}
	if err := sw.Stop(); err != nil {
		t.Fatalf("swap: %v", err)
	}
	ents, err := os.ReadDir(outside)
	testutil.Must(t, err)
	if len(ents) != 1 || ents[0].Name() != "keep.txt" {
		t.Fatalf("a write landed outside the root: %v", ents)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "keep me\n" {
		t.Fatalf("the outside file changed: %q %v", b, err)
	}
	t.Logf("%d swaps, %d writes overlapped a swap, %d landed inside, %d refused %v", sw.Swaps(), overlapped, landed, refused, reasons)
	if sw.Swaps() == 0 || overlapped == 0 {
		t.Fatalf("the race was not exercised: %d swaps, %d during a write", sw.Swaps(), overlapped)
	}
	if landed == 0 || refused == 0 {
		t.Fatalf("the race never went both ways: %d landed, %d refused", landed, refused)
	}
	// A landed write is in the real directory, whichever name it has now.
	real := dir
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		real = swap
	}
	if b, err := os.ReadFile(filepath.Join(real, "f.txt")); err != nil || string(b) != "x" {
		t.Fatalf("no landed write in the real directory: %q %v", b, err)
	}
	leftTemps(t, filepath.Join(fx.Base, "workspace/src"))
}

func TestDeletes(t *testing.T) {
	fx, h := writeFixture(t)
	src := filepath.Join(fx.Base, "workspace/src")
	testutil.Must(t, os.WriteFile(filepath.Join(src, "gone.txt"), []byte("bye"), 0o644))
	del := func(args map[string]any) *api.CallResult { res, _ := h.call("delete_file", args); return res }

	if res := del(map[string]any{"path": "workspace/src/gone.txt", "if_match": digest("nope")}); res.Reason != api.ReasonPreconditionFailed {
		t.Fatalf("delete with a wrong if_match: %+v", res)
	}
	res := del(map[string]any{"path": "workspace/src/gone.txt", "if_match": digest("bye")})
	if !res.OK || res.SHA256 != digest("bye") {
		t.Fatalf("delete: %+v", res)
	}
	if _, err := os.Lstat(filepath.Join(src, "gone.txt")); err == nil {
		t.Fatal("the file is still there")
	}
	if !strings.Contains(string(h.ledger()), `"size":3`) {
		t.Error("the result record lacks the removed file's size")
	}
	for _, tc := range []struct {
		path string
		want api.Reason
	}{
		{"workspace/src/gone.txt", api.ReasonNotFound},
		{"workspace/src/sub", api.ReasonNotAFile},
		{"workspace/src/.env", api.ReasonNeverListed},
		{"workspace/src/fifo", api.ReasonUnsupportedFileType},
		{"workspace/secret.txt", api.ReasonOutsideRoots},
	} {
		if res := del(map[string]any{"path": tc.path}); res.OK || res.Reason != tc.want {
			t.Errorf("delete %s: %s, want %s", tc.path, res.Reason, tc.want)
		}
	}
	// A symlink to outside: the link goes, the target stays.
	if res := del(map[string]any{"path": "workspace/src/abs_out"}); !res.OK {
		t.Fatalf("delete a symlink: %+v", res)
	}
	if _, err := os.Lstat(filepath.Join(src, "abs_out")); err == nil {
		t.Fatal("the link is still there")
	}
	if b, _ := os.ReadFile(filepath.Join(fx.Base, "secret.txt")); !strings.HasPrefix(string(b), escapetest.Secret) {
		t.Fatal("the link's target was touched")
	}
}

// TestStaleWriteNotCommitted: a write whose task is cancelled between its
// decision and its commit does not commit.
func TestStaleWriteNotCommitted(t *testing.T) {
	fx, h := writeFixture(t)
	p := filepath.Join(fx.Base, "workspace/src/stale.txt")
	testHookBeforeCommit = func(c *call) { c.d.calls.cancelTask([]taskKey{c.task}) }
	defer func() { testHookBeforeCommit = nil }()
	res, err := h.c.Call(context.Background(), api.CallRequest{Tool: "write_file", Task: "t-stale",
		Args: mustJSON(map[string]any{"path": "workspace/src/stale.txt", "content": "late"})})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.Reason != api.ReasonTaskCancelled || res.Verdict != api.VerdictAllow {
		t.Fatalf("stale write: %+v", res)
	}
	if _, err := os.Lstat(p); err == nil {
		t.Fatal("a stale write committed")
	}
	leftTemps(t, filepath.Dir(p))
}

// TestLinkedBeforeCommit: a file that gains a second name between a
// write's decision (which refuses a linked file in a tool with never
// globs) and its commit is not what the call was decided on:
// precondition_failed, nothing changed. The commit's error wraps both
// fileop.ErrChanged and errHardLinked (unsupported_file_type); the reason
// is ErrChanged's, the first it wraps (errclass finds the outermost,
// leftmost reason).
func TestLinkedBeforeCommit(t *testing.T) {
	fx, h := writeFixture(t)
	src := filepath.Join(fx.Base, "workspace/src")
	p := filepath.Join(src, "linked.txt")
	testutil.Must(t, os.WriteFile(p, []byte("old"), 0o644))
	testHookBeforeCommit = func(*call) { testutil.Must(t, os.Link(p, filepath.Join(src, "second-name"))) }
	defer func() { testHookBeforeCommit = nil }()
	res, body := h.call("write_file", map[string]any{"path": "workspace/src/linked.txt", "content": "new"})
	if res.OK || res.Reason != api.ReasonPreconditionFailed {
		t.Errorf("a write to a file linked after the decision: %s", body)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "old" {
		t.Errorf("the file is now %q (%v)", b, err)
	}
	leftTemps(t, src)
}
