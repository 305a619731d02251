//go:build linux

package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// Hardening II, classes 5 (no quota on writes) and 8 (a failed directory
// fsync recorded as a failure), and the unbounded if_match hash: over the
// socket, on real file systems (a tiny tmpfs fills up for real).

// spaceFixture: a base whose ws/ is a tmpfs of size (unless size is
// empty), with write, delete and read tools on ws/.
func spaceFixture(t *testing.T, size, principals string, tweak ...func(base string, cfg *Config)) (string, *harness) {
	t.Helper()
	testutil.RequireRoot(t)
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	if size != "" {
		testutil.MountTmpfs(t, ws, size)
	} else if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	m := writeManifest(t, base, `{"schema_version":1,`+principals+`"tools":{
	  "write_file":{"operation":"write","roots":["ws"],"max_bytes":1048576},
	  "delete_file":{"operation":"delete","roots":["ws"]},
	  "read_file":{"operation":"read","roots":["ws"]}}}`)
	var tw []func(*Config)
	for _, f := range tweak {
		tw = append(tw, func(cfg *Config) { f(base, cfg) })
	}
	return ws, start(t, m, securefs.ModeAuto, tw...)
}

// results are the ledger's result records, by tool.
func (h *harness) results(tool string) []audit.Record {
	h.t.Helper()
	var out []audit.Record
	for _, line := range bytes.Split(bytes.TrimSpace(h.ledger()), []byte("\n")) {
		var r audit.Record
		if err := json.Unmarshal(line, &r); err != nil {
			h.t.Fatal(err)
		}
		if r.Kind == audit.KindResult && r.Tool == tool {
			out = append(out, r)
		}
	}
	return out
}

func fileIs(t *testing.T, p, want string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil || string(b) != want {
		t.Errorf("%s: %.40q %v, want %.40q", filepath.Base(p), b, err, want)
	}
}

// TestWriteNoSpaceLeavesOld: a write that would overfill its tiny file
// system ends no_space (it was internal_error), the old content intact,
// no temp file left, and the ledger says no_space.
func TestWriteNoSpaceLeavesOld(t *testing.T) {
	ws, h := spaceFixture(t, "1M", "")
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("old"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "filler"), make([]byte, 600<<10), 0o644))
	res := h.write(map[string]any{"path": "ws/a.txt", "content": strings.Repeat("x", 500<<10)})
	if res.OK || res.Reason != api.ReasonNoSpace || res.SHA256 != "" {
		t.Fatalf("overfilling write: ok=%v reason=%s", res.OK, res.Reason)
	}
	fileIs(t, filepath.Join(ws, "a.txt"), "old")
	leftTemps(t, ws)
	if r := h.results("write_file"); len(r) != 1 || r[0].Reason != api.ReasonNoSpace || r[0].Result.OK {
		t.Fatalf("ledger: %+v", r)
	}
}

// TestMinFreeRefusesBeforeStart: with the default reserve (5% of a 1 MiB
// file system here) a write that would fit but leave less than the
// reserve is refused before it starts and changes nothing (it used to
// commit, leaving the file system all but full); a smaller one succeeds.
func TestMinFreeRefusesBeforeStart(t *testing.T) {
	ws, h := spaceFixture(t, "1M", "")
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("old"), 0o644))
	res := h.write(map[string]any{"path": "ws/a.txt", "content": strings.Repeat("x", 1_000_000)})
	if res.OK || res.Reason != api.ReasonNoSpace {
		t.Fatalf("a write into the reserve: ok=%v reason=%s", res.OK, res.Reason)
	}
	fileIs(t, filepath.Join(ws, "a.txt"), "old")
	leftTemps(t, ws)
	small := strings.Repeat("y", 100<<10)
	if res := h.write(map[string]any{"path": "ws/a.txt", "content": small}); !res.OK || res.SHA256 != digest(small) {
		t.Fatalf("a write that leaves the reserve: ok=%v reason=%s", res.OK, res.Reason)
	}
	fileIs(t, filepath.Join(ws, "a.txt"), small)
}

// TestFullDiskSparesOthers is the finding itself: the workspace and the
// state dir (the ledger) on one file system, as a default install has
// them. An agent writes until it is refused: it ends no_space (it used to
// fill the disk, get internal_error, and from then on every caller got
// audit_unavailable); another principal's read still works and the
// ledger still records it.
func TestFullDiskSparesOthers(t *testing.T) {
	bin := os.Getenv("SLUICE_BIN_DIR")
	if bin == "" {
		t.Fatal("SLUICE_BIN_DIR is unset: run make build and point it at bin/ (the other principal runs bin/sluice as uid 65534)")
	}
	principals := `"principals":{"agent":{"uids":[0],"tools":["write_file"]},"reader":{"uids":[65534],"tools":["read_file"]}},`
	ws, h := spaceFixture(t, "2M", principals, func(base string, cfg *Config) {
		cfg.StateDir = filepath.Join(base, "ws", ".state") // the same file system
	})
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("readable"), 0o644))
	var last *api.CallResult
	for i := 0; i < 40; i++ {
		last = h.write(map[string]any{"path": fmt.Sprintf("ws/f%d", i), "content": strings.Repeat("z", 100<<10)})
		if !last.OK {
			break
		}
	}
	if last.OK || last.Reason != api.ReasonNoSpace {
		t.Fatalf("the agent's last write: ok=%v reason=%s, want no_space", last.OK, last.Reason)
	}
	out, err := asNobody(t, bin, h.socket, "call", "read_file", "--args", `{"path":"ws/a.txt"}`)
	if err != nil || string(out) != "readable" {
		t.Fatalf("the other principal's read: %q %v", out, err)
	}
	r := h.results("read_file")
	if len(r) != 1 || !r[0].Result.OK || r[0].Principal.Name != "reader" {
		t.Fatalf("the ledger lacks the read: %+v", r)
	}
}

// asNobody runs bin/sluice as uid 65534 against socket.
func asNobody(t *testing.T, binDir, socket string, args ...string) ([]byte, error) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(binDir, "sluice"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir), filepath.Dir(socket), filepath.Dir(filepath.Dir(socket))} {
		testutil.Must(t, os.Chmod(d, 0o755))
	}
	testutil.Must(t, os.Chmod(socket, 0o666))
	cli := filepath.Join(dir, "sluice")
	if err := os.WriteFile(cli, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cli, args...)
	cmd.Env = []string{"SLUICE_SOCKET=" + socket, "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		err = fmt.Errorf("%w: %s", err, stderr.String())
	}
	return out, err
}

// TestIfMatchOverCapRefusedFast: if_match over a file above the hash cap
// (a sparse 1 TiB file: no disk, but hashing it used to take hours and
// hold the name's lock) is precondition_failed at once, for a write and a
// delete, and changes nothing; a delete without if_match removes it and
// records its size, without a digest.
func TestIfMatchOverCapRefusedFast(t *testing.T) {
	ws, h := spaceFixture(t, "", "")
	huge := filepath.Join(ws, "huge")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 1<<40); err != nil {
		t.Fatal(err)
	}
	if res := h.write(map[string]any{"path": "ws/huge", "content": "x", "if_match": digest("")}); res.OK || res.Reason != api.ReasonPreconditionFailed {
		t.Fatalf("write with if_match over the cap: ok=%v reason=%s", res.OK, res.Reason)
	}
	if res, _ := h.call("delete_file", map[string]any{"path": "ws/huge", "if_match": digest("")}); res.OK || res.Reason != api.ReasonPreconditionFailed {
		t.Fatalf("delete with if_match over the cap: ok=%v reason=%s", res.OK, res.Reason)
	}
	if fi, err := os.Stat(huge); err != nil || fi.Size() != 1<<40 {
		t.Fatalf("the file changed: %v", err)
	}
	if res, _ := h.call("delete_file", map[string]any{"path": "ws/huge"}); !res.OK || res.SHA256 != "" {
		t.Fatalf("delete over the cap: ok=%v reason=%s sha256=%q", res.OK, res.Reason, res.SHA256)
	}
	r := h.results("delete_file")
	if len(r) != 2 || r[1].Result.Size != 1<<40 || r[1].Result.SHA256 != "" {
		t.Fatalf("the ledger does not record what the delete removed: %+v", r)
	}
}

// TestENOSPCDuringWrite: with --min-free 0 the write itself runs out of
// space (ENOSPC from write(2) on the temp inode): no_space, not
// internal_error, the old content intact and no temp file left.
func TestENOSPCDuringWrite(t *testing.T) {
	ws, h := spaceFixture(t, "1M", "", func(_ string, cfg *Config) { cfg.MinFree = fileop.Reserve{Off: true} })
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("old"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "filler"), make([]byte, 600<<10), 0o644))
	res := h.write(map[string]any{"path": "ws/a.txt", "content": strings.Repeat("x", 500<<10)})
	if res.OK || res.Reason != api.ReasonNoSpace {
		t.Fatalf("a write that hits ENOSPC: ok=%v reason=%s", res.OK, res.Reason)
	}
	fileIs(t, filepath.Join(ws, "a.txt"), "old")
	leftTemps(t, ws)
	if !strings.Contains(h.logs.String(), "no space left on device") {
		t.Error("the log does not show the ENOSPC itself (the reserve refused it instead?)")
	}
}

// TestGoneCallStopsHash: a call whose client went away between its
// decision and its commit stops hashing for if_match at the next chunk and
// commits nothing (the hash used to run to the end, holding the name's
// lock, and the write then committed for nobody).
func TestGoneCallStopsHash(t *testing.T) {
	ws, h := spaceFixture(t, "", "")
	big := bytes.Repeat([]byte("0123456789abcdef"), 2<<20) // 32 MiB
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "big"), big, 0o644))
	testHookBeforeCommit = func(c *call) { c.stop(errClientGone) }
	t.Cleanup(func() { testHookBeforeCommit = nil })
	res := h.write(map[string]any{"path": "ws/big", "content": "new", "if_match": digest(string(big))})
	if res.OK || res.Reason == api.ReasonPreconditionFailed {
		t.Fatalf("a gone call's write: ok=%v reason=%s", res.OK, res.Reason)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "big")); !bytes.Equal(b, big) {
		t.Fatal("a gone call's write committed")
	}
	leftTemps(t, ws)
}
