//go:build linux

package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/internal/fileop"
)

// Class 8: the directory fsync after a commit fails with EIO (through
// fileop.TestHookSyncDir, the one seam; the fsync is the only thing that
// fails). The write and the delete took effect, so the result and the
// ledger say so: ok, what was written or removed, durable:false and
// reason not_durable, where they used to say internal_error.

func failDirSync(t *testing.T) {
	fileop.TestHookSyncDir = func(int) error { return unix.EIO }
	t.Cleanup(func() { fileop.TestHookSyncDir = nil })
}

func notDurable(t *testing.T, what string, res *api.CallResult, rec audit.Record, sum string) {
	t.Helper()
	if !res.OK || res.Reason != api.ReasonNotDurable || res.Durable == nil || *res.Durable || res.SHA256 != sum {
		t.Errorf("%s result: ok=%v reason=%s durable=%v sha256=%s, want ok, not_durable, durable:false, %s", what, res.OK, res.Reason, res.Durable, res.SHA256, sum)
	}
	r := rec.Result
	if rec.Reason != api.ReasonNotDurable || r == nil || !r.OK || r.Durable == nil || *r.Durable || r.SHA256 != sum {
		t.Errorf("%s ledger: reason=%s result=%+v, want ok, not_durable, durable:false, %s", what, rec.Reason, r, sum)
	}
}

func TestWriteDeleteNotDurable(t *testing.T) {
	ws, h := spaceFixture(t, "", "")
	// Durable first: durable:true in the result and the ledger.
	res := h.write(map[string]any{"path": "ws/a.txt", "content": "old"})
	if !res.OK || res.Durable == nil || !*res.Durable {
		t.Fatalf("a durable write: ok=%v reason=%s durable=%v", res.OK, res.Reason, res.Durable)
	}
	if r := h.results("write_file"); len(r) != 1 || r[0].Result.Durable == nil || !*r[0].Result.Durable {
		t.Fatalf("ledger of a durable write: %+v", r)
	}

	failDirSync(t)
	res = h.write(map[string]any{"path": "ws/a.txt", "content": "new", "if_match": digest("old")})
	fileIs(t, filepath.Join(ws, "a.txt"), "new")
	w := h.results("write_file")
	notDurable(t, "write", res, w[len(w)-1], digest("new"))
	if w[len(w)-1].Result.Size != 3 {
		t.Errorf("ledger size %d, want 3", w[len(w)-1].Result.Size)
	}
	leftTemps(t, ws)

	res, _ = h.call("delete_file", map[string]any{"path": "ws/a.txt"})
	if _, err := os.Lstat(filepath.Join(ws, "a.txt")); !os.IsNotExist(err) {
		t.Fatalf("the deleted file is still there: %v", err)
	}
	d := h.results("delete_file")
	notDurable(t, "delete", res, d[len(d)-1], digest("new"))
}
