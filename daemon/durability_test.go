//go:build linux

package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// captureLedger makes the daemons the test starts hand it their ledger,
// so that the test can inject faults into it.
func captureLedger(t *testing.T) *atomic.Pointer[audit.Ledger] {
	t.Helper()
	orig := openLedger
	var p atomic.Pointer[audit.Ledger]
	openLedger = func(path string, o audit.Options) (*audit.Ledger, audit.Recovery, error) {
		l, rec, err := orig(path, o)
		if l != nil {
			p.Store(l)
		}
		return l, rec, err
	}
	t.Cleanup(func() { openLedger = orig })
	return &p
}

// inotifyWatch counts the inotify events of one path.
type inotifyWatch struct{ fd int }

func watchPath(t *testing.T, path string, mask uint32) *inotifyWatch {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, path, mask); err != nil {
		t.Fatalf("watch %s: %v", path, err)
	}
	return &inotifyWatch{fd: fd}
}

// events drains the events queued so far. A command's reads through the
// view are done before its call's result is sent (the view opens the
// host file as the command opens it), so their events are queued by then.
func (w *inotifyWatch) events() int {
	n := 0
	buf := make([]byte, 4096)
	for {
		k, err := unix.Read(w.fd, buf)
		if err != nil || k <= 0 {
			return n
		}
		for off := 0; off+unix.SizeofInotifyEvent <= k; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			n++
		}
	}
}

// noContainersLeft waits until every container made under runDir is
// destroyed (libcontainer's state dirs gone): one made for a call that
// ran nothing is destroyed in the background once the call has ended.
func noContainersLeft(t *testing.T, runDir string) {
	t.Helper()
	state := filepath.Join(runDir, "state")
	if err := testutil.Poll(20*time.Second, func() error {
		ents, err := os.ReadDir(state)
		if err != nil {
			return err
		}
		if len(ents) != 0 {
			return fmt.Errorf("%d containers still in %s", len(ents), state)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// TestDurabilityBeforeEffect: for write, edit, move, mkdir, delete and an
// execute call with egress, a decision that cannot be appended or made
// durable denies the call audit_unavailable and the effect does not
// happen (docs/design.md §3). Without the decision's sync before the
// effect in pipeline, the sync cases fail: the file is written or
// deleted, or the command runs (it reads a file through the view, which
// opens it on the host). A pool-0 tool's container is made while the
// decision syncs (startCold): it must run nothing and be destroyed. An
// execute call without egress has no effect: it may run while its
// decision syncs, and a failed sync withholds its output (it ends
// audit_unavailable); a decision that cannot be appended runs nothing.
// (TestEffectFreeExecuteHoldsOutput holds the sync instead.)
func TestDurabilityBeforeEffect(t *testing.T) {
	testutil.RequireRoot(t)
	boom := fmt.Errorf("injected: %w", unix.EIO)
	faults := map[string]audit.Faults{
		"append": {Append: func(r *audit.Record) error {
			if r.Kind == audit.KindDecision {
				return boom
			}
			return nil
		}},
		"sync": {Sync: func() error { return boom }},
	}
	for _, fault := range []string{"append", "sync"} {
		for _, op := range []string{"write", "edit", "move", "mkdir", "delete", "execute", "execute_egress"} {
			t.Run(fault+"/"+op, func(t *testing.T) {
				ledger := captureLedger(t)
				fx := escapetest.Build(t)
				testutil.Must(t, os.Chmod(fx.Base, 0o755))
				m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{
				  "write_file":{"operation":"write","roots":["workspace/src"]},
				  "delete_file":{"operation":"delete","roots":["workspace/src"]},
				  "edit_file":{"operation":"edit","roots":["workspace/src"]},
				  "move_file":{"operation":"move","roots":["workspace/src"]},
				  "make_dir":{"operation":"mkdir","roots":["workspace/src"]},
				  "run":{"operation":"execute","commands":[["cat","marker.txt"]],"mounts":["workspace/src"],"cwd":"workspace/src","pool":0},
				  "run_net":{"operation":"execute","commands":[["cat","marker.txt"]],"mounts":["workspace/src"],"cwd":"workspace/src","pool":0,
				    "egress":{"hosts":["example.com"]}}}}`)
				runDir := filepath.Join(t.TempDir(), "run")
				h := start(t, m, securefs.ModeAuto, func(c *Config) { c.RunDir = runDir })
				src := filepath.Join(fx.Base, "workspace/src")
				victim := filepath.Join(src, "victim.txt")
				testutil.Must(t, os.WriteFile(victim, []byte("keep"), 0o644))
				var w *inotifyWatch
				tool := map[string]string{"execute": "run", "execute_egress": "run_net"}[op]
				if tool != "" {
					marker := filepath.Join(src, "marker.txt")
					testutil.Must(t, os.WriteFile(marker, []byte("ran\n"), 0o644))
					w = watchPath(t, marker, unix.IN_OPEN)
					// Control: an allowed run reads the marker, and we see it.
					if res, _ := h.call(tool, map[string]any{}); !res.OK || res.Output == nil || *res.Output != "ran\n" || w.events() == 0 {
						t.Fatalf("control run: %+v, or its read of the marker was not seen", res)
					}
				}
				ledger.Load().SetFaults(faults[fault])
				var res *api.CallResult
				switch op {
				case "write":
					res, _ = h.call("write_file", map[string]any{"path": "workspace/src/new.txt", "content": "x"})
					if _, err := os.Stat(filepath.Join(src, "new.txt")); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("the write happened without a durable decision: %v", err)
					}
				case "edit":
					res, _ = h.call("edit_file", map[string]any{"path": "workspace/src/victim.txt", "edits": []map[string]string{{"old_text": "keep", "new_text": "lost"}}})
					if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
						t.Errorf("the edit happened without a durable decision: %q %v", b, err)
					}
				case "move":
					res, _ = h.call("move_file", map[string]any{"path": "workspace/src/victim.txt", "to": "workspace/src/moved.txt"})
					if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
						t.Errorf("the move happened without a durable decision: %q %v", b, err)
					}
				case "mkdir":
					res, _ = h.call("make_dir", map[string]any{"path": "workspace/src/newdir"})
					if _, err := os.Lstat(filepath.Join(src, "newdir")); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("the mkdir happened without a durable decision: %v", err)
					}
				case "delete":
					res, _ = h.call("delete_file", map[string]any{"path": "workspace/src/victim.txt"})
					if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
						t.Errorf("the delete happened without a durable decision: %q %v", b, err)
					}
				case "execute_egress":
					res, _ = h.call("run_net", map[string]any{})
					if n := w.events(); n != 0 {
						t.Errorf("the command with egress ran (%d opens of the marker) without a durable decision", n)
					}
					noContainersLeft(t, runDir)
				case "execute":
					res, _ = h.call("run", map[string]any{})
					if n := w.events(); fault == "append" && n != 0 {
						t.Errorf("the command ran (%d opens of the marker) with no decision record", n)
					}
					if res.Output != nil || res.OutputB64 != "" || res.Stderr != "" {
						t.Errorf("output left without a durable decision: %+v", res)
					}
				}
				if res.OK || res.Reason != api.ReasonAuditUnavailable {
					t.Errorf("result %+v, want audit_unavailable", res)
				}
				hl, err := h.c.Health(context.Background())
				if err != nil || hl.Status != "degraded" || hl.Audit != "degraded" || hl.AuditError == "" {
					t.Errorf("health after a failed %s: %+v %v", fault, hl, err)
				}
			})
		}
	}
}

// stoppable is a harness whose daemon the test stops (and restarts on
// the same state dir) itself.
type stoppable struct {
	*harness
	stop func()
}

func startStop(t *testing.T, manifest string, tweak ...func(*Config)) *stoppable {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{
		Manifest: manifest, Socket: filepath.Join(dir, "sluice.sock"), StateDir: filepath.Join(dir, "state"),
		Logger: slogJSON(&testutil.LockedBuffer{}), ResolveMode: securefs.ModeAuto,
		RunDir: filepath.Join(dir, "run"), Helper: testutil.Helper(t),
	}
	for _, f := range tweak {
		f(&cfg)
	}
	stop := launch(t, cfg)
	h := &harness{t: t, socket: cfg.Socket, stateDir: cfg.StateDir, c: client.New(cfg.Socket)}
	var once atomic.Bool
	s := &stoppable{harness: h, stop: func() {
		if once.CompareAndSwap(false, true) {
			h.c.Close()
			stop()
		}
	}}
	t.Cleanup(s.stop)
	return s
}

func slogJSON(w *testutil.LockedBuffer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

func sluiceBin(t *testing.T) string {
	t.Helper()
	d := os.Getenv("SLUICE_BIN_DIR")
	if d == "" {
		t.Fatal("SLUICE_BIN_DIR unset: run 'make build' and pass SLUICE_BIN_DIR=$PWD/bin")
	}
	return filepath.Join(d, "sluice")
}

// verifyCLI runs the real 'sluice audit verify' and returns its exit code
// and output.
func verifyCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(sluiceBin(t), append([]string{"audit", "verify"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

func cutLastLines(t *testing.T, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	lines = lines[:len(lines)-1]
	if err := os.WriteFile(path, bytes.Join(lines[:len(lines)-n], nil), 0o600); err != nil {
		t.Fatal(err)
	}
}

func records(t *testing.T, path string) []audit.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []audit.Record
	if err := audit.Read(f, func(r *audit.Record) error { out = append(out, *r); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLedgerCutWhileStopped (review finding 9): the last two records (a
// denied .env attempt) are cut while sluiced is stopped. verify names the
// anchor and exits 1; the next start logs an ERROR, appends a truncated
// record and continues the sequence past the old head.
func TestLedgerCutWhileStopped(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	state := t.TempDir()
	logs := &testutil.LockedBuffer{}
	cfg := func(c *Config) {
		c.StateDir = state
		c.Logger = slogJSON(logs)
	}
	h := startStop(t, fx.Manifest, cfg)
	h.call("read_file", map[string]string{"path": "workspace/src/a.py"})
	if res, _ := h.call("read_file", map[string]string{"path": "workspace/src/sub/.env"}); res.OK {
		t.Fatal(".env read allowed")
	}
	h.stop()
	path := filepath.Join(state, "audit.jsonl")
	before := records(t, path)
	oldHead := before[len(before)-1]
	if code, out := verifyCLI(t, path); code != 0 {
		t.Fatalf("intact ledger: exit %d: %s", code, out)
	}
	cutLastLines(t, path, 2) // the .env decision and its result
	code, out := verifyCLI(t, path)
	if code != 1 || !strings.Contains(out, "BEHIND anchor") || !strings.Contains(out, "2 records were cut") ||
		!strings.Contains(out, "holds 2 records that continue this ledger") {
		t.Fatalf("cut ledger: verify exit %d: %s", code, out)
	}

	// With the write-ahead ring left alone, the next start appends the
	// cut records back from it and says so.
	logs1 := &testutil.LockedBuffer{}
	h = startStop(t, fx.Manifest, cfg, func(c *Config) { c.Logger = slogJSON(logs1) })
	h.stop()
	restored := records(t, path)
	if restored[oldHead.Seq-1].Hash != oldHead.Hash || restored[oldHead.Seq].Kind != audit.KindRecovered ||
		!strings.Contains(restored[oldHead.Seq].Detail, "2 records") {
		t.Fatalf("the cut records were not appended back from the ring: %+v", restored[oldHead.Seq-2:])
	}
	if !strings.Contains(logs1.String(), `"level":"WARN","msg":"audit ledger ended before records its write-ahead ring held durable`) {
		t.Fatalf("no WARN logged: %s", logs1.String())
	}
	if code, out := verifyCLI(t, path); code != 0 {
		t.Fatalf("restored ledger: verify exit %d: %s", code, out)
	}

	// Whoever cuts records empties the ring too: then the anchor is what
	// tells.
	before = records(t, path)
	oldHead = before[len(before)-1]
	cutLastLines(t, path, 2)
	testutil.Must(t, os.Remove(audit.WALPath(path)))
	if code, out := verifyCLI(t, path); code != 1 || !strings.Contains(out, "BEHIND anchor") || strings.Contains(out, "write-ahead ring") {
		t.Fatalf("cut ledger, ring removed: verify exit %d: %s", code, out)
	}

	logs2 := &testutil.LockedBuffer{}
	h = startStop(t, fx.Manifest, cfg, func(c *Config) { c.Logger = slogJSON(logs2) })
	after := records(t, path)
	var trunc *audit.Record
	for i := range after {
		if after[i].Kind == audit.KindTruncated {
			trunc = &after[i]
		}
	}
	if trunc == nil || trunc.Seq != oldHead.Seq+1 || !strings.Contains(trunc.Detail, fmt.Sprintf("seq %d", oldHead.Seq)) {
		t.Fatalf("no truncated record continuing at seq %d: %+v", oldHead.Seq+1, trunc)
	}
	if last := after[len(after)-1]; last.Seq <= oldHead.Seq+1 {
		t.Fatalf("sequence reused: last seq %d", last.Seq)
	}
	if !strings.Contains(logs2.String(), `"level":"ERROR","msg":"audit ledger was cut`) {
		t.Fatalf("no ERROR logged: %s", logs2.String())
	}
	h.stop()
	code, out = verifyCLI(t, path)
	if code != 1 || !strings.Contains(out, fmt.Sprintf("TRUNCATED at seq %d", oldHead.Seq+1)) {
		t.Fatalf("verify after restart: exit %d: %s", code, out)
	}
	if code, out = verifyCLI(t, "--accept-truncated", path); code != 0 || !strings.Contains(out, "TRUNCATED") {
		t.Fatalf("--accept-truncated: exit %d: %s", code, out)
	}
}

// TestHeadCatchesConsistentCut: root cuts the ledger and puts back an
// older anchor that matches the cut; the anchor is fooled, the head from
// the journal (--head) is not.
func TestHeadCatchesConsistentCut(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	state := t.TempDir()
	logs := &testutil.LockedBuffer{}
	h := startStop(t, fx.Manifest, func(c *Config) { c.StateDir = state; c.Logger = slogJSON(logs) })
	h.call("read_file", map[string]string{"path": "workspace/src/a.py"})
	anchorPath := filepath.Join(state, "audit.anchor")
	oldAnchor, err := os.ReadFile(anchorPath)
	if err != nil {
		t.Fatal(err)
	}
	n := len(records(t, filepath.Join(state, "audit.jsonl")))
	h.call("read_file", map[string]string{"path": "workspace/src/sub/.env"})
	h.stop()
	// The journal's last head line.
	var head string
	for _, line := range strings.Split(logs.String(), "\n") {
		var e struct{ Msg, Head string }
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "audit head" {
			head = e.Head
		}
	}
	path := filepath.Join(state, "audit.jsonl")
	if head == "" || !strings.HasPrefix(head, fmt.Sprint(len(records(t, path)))+":") {
		t.Fatalf("journal head %q does not name the last record", head)
	}
	cutLastLines(t, path, len(records(t, path))-n)
	testutil.Must(t, os.WriteFile(anchorPath, oldAnchor, 0o600))
	if code, out := verifyCLI(t, path); code != 0 {
		t.Fatalf("a consistent cut should fool the anchor alone: exit %d: %s", code, out)
	}
	code, out := verifyCLI(t, "--head", head, path)
	if code != 1 || !strings.Contains(out, "BEHIND --head") {
		t.Fatalf("--head %s: exit %d: %s", head, code, out)
	}
}

// TestFullDiskReserve (review finding 5): with the state dir's file system
// filled by someone else, denials are still recorded from the ledger's
// reserve and /v1/health says degraded.
func TestFullDiskReserve(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	state := t.TempDir()
	testutil.MountTmpfs(t, state, "16m")
	h := start(t, fx.Manifest, securefs.ModeAuto, func(c *Config) { c.StateDir = state })
	if hl, err := h.c.Health(context.Background()); err != nil || hl.Status != "ok" || hl.Audit != "ok" {
		t.Fatalf("health before: %+v %v", hl, err)
	}
	filler := filepath.Join(state, "filler")
	out, _ := exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=64k").CombinedOutput()
	if !bytes.Contains(out, []byte("No space left")) {
		t.Fatalf("dd did not fill the state dir: %s", out)
	}
	defer os.Remove(filler)
	for i := range 200 {
		res, _ := h.call("read_file", map[string]string{"path": "workspace/src/sub/.env"})
		if res.Reason == api.ReasonAuditUnavailable || res.OK {
			t.Fatalf("denial %d on a full disk: %+v", i, res)
		}
	}
	hl, err := h.c.Health(context.Background())
	if err != nil || hl.Status != "degraded" || hl.Audit != "degraded" || !strings.Contains(hl.AuditError, "reserve") {
		t.Fatalf("health on a full disk: %+v %v", hl, err)
	}
	denials := 0
	for _, r := range records(t, filepath.Join(state, "audit.jsonl")) {
		if r.Kind == audit.KindDecision && strings.HasSuffix(r.Resource, ".env") || strings.Contains(string(r.Args), ".env") {
			denials++
		}
	}
	if denials < 200 {
		t.Fatalf("%d denials recorded, want 200", denials)
	}
}

// TestColdCallCancelledWhileDecisionSyncs: a pool-0 call with effects (a
// command with egress) has its container made while its decision syncs
// (startCold). Cancelled by id before that
// sync returns, the call runs nothing, ends cancelled, and leaves no
// container behind nor its container slot taken: with --max-containers 1
// the next call runs.
func TestColdCallCancelledWhileDecisionSyncs(t *testing.T) {
	testutil.RequireRoot(t)
	ledger := captureLedger(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{
	  "run":{"operation":"execute","commands":[["cat","marker.txt"]],"mounts":["workspace/src"],"cwd":"workspace/src","pool":0,
	    "egress":{"hosts":["example.com"]}}}}`)
	runDir := filepath.Join(t.TempDir(), "run")
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.RunDir = runDir; c.MaxContainers = 1 })
	marker := filepath.Join(fx.Base, "workspace/src/marker.txt")
	testutil.Must(t, os.WriteFile(marker, []byte("ran\n"), 0o644))
	w := watchPath(t, marker, unix.IN_OPEN)
	run := func() (*api.CallResult, error) {
		return h.c.Call(context.Background(), api.CallRequest{Tool: "run", Args: json.RawMessage(`{}`)})
	}
	if res, err := run(); err != nil || !res.OK || w.events() == 0 {
		t.Fatalf("control run: %+v %v, or its read of the marker was not seen", res, err)
	}

	ids := make(chan string, 1)
	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	ledger.Load().SetFaults(audit.Faults{
		Append: func(r *audit.Record) error {
			if r.Kind == audit.KindDecision {
				select {
				case ids <- r.CallID:
				default:
				}
			}
			return nil
		},
		Sync: func() error {
			if first.CompareAndSwap(false, true) {
				close(entered) // the decision's sync: hold it
				<-release
			}
			return nil
		},
	})
	type result struct {
		res *api.CallResult
		err error
	}
	done := make(chan result, 1)
	go func() { res, err := run(); done <- result{res, err} }()
	<-entered
	if _, err := h.c.CancelCall(context.Background(), <-ids); err != nil {
		close(release)
		t.Fatalf("cancel: %v", err)
	}
	close(release)
	r := <-done
	if r.err != nil || r.res.OK || r.res.Reason != api.ReasonCancelled {
		t.Errorf("cancelled call: %+v %v, want reason cancelled", r.res, r.err)
	}
	if n := w.events(); n != 0 {
		t.Errorf("the cancelled call's command ran (%d opens of the marker)", n)
	}
	noContainersLeft(t, runDir)
	if res, err := run(); err != nil || !res.OK || w.events() == 0 {
		t.Errorf("the next call, with the one container slot: %+v %v", res, err)
	}
}

// TestEffectFreeExecuteHoldsOutput: an execute call without egress has
// no effect, so it runs while its decision syncs (docs/design.md §3), but
// no byte of its output, buffered or streamed, reaches the client before
// that decision is durable. The decision's sync is held: buffered, the
// command has run and its result record is appended before the one sync
// of the call (which covers both records); streamed, the command opens
// and closes its file (its output is printed) while the sync is held. In
// both, not a byte (not even the HTTP status line) is on the client's
// socket until the sync is released; then the output arrives, after the
// decision event when streamed. A buffered call costs one sync, a
// streamed one two (its decision's beside the command).
func TestEffectFreeExecuteHoldsOutput(t *testing.T) {
	testutil.RequireRoot(t)
	for _, mode := range []string{"buffered", "streamed"} {
		t.Run(mode, func(t *testing.T) {
			ledger := captureLedger(t)
			fx := escapetest.Build(t)
			testutil.Must(t, os.Chmod(fx.Base, 0o755))
			m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{
			  "run":{"operation":"execute","commands":[["cat","marker.txt"]],"mounts":["workspace/src"],"cwd":"workspace/src","pool":1}}}`)
			h := start(t, m, securefs.ModeAuto)
			marker := filepath.Join(fx.Base, "workspace/src/marker.txt")
			testutil.Must(t, os.WriteFile(marker, []byte("ran\n"), 0o644))
			w := watchPath(t, marker, unix.IN_OPEN|unix.IN_CLOSE_NOWRITE)
			if res, _ := h.call("run", map[string]any{}); !res.OK || res.Output == nil || *res.Output != "ran\n" || w.events() == 0 {
				t.Fatalf("control run: %+v, or its read of the marker was not seen", res)
			}

			var resultAppended atomic.Bool
			var syncs atomic.Int32
			entered, release := make(chan struct{}), make(chan struct{})
			var released atomic.Bool
			defer func() {
				if released.CompareAndSwap(false, true) {
					close(release)
				}
			}()
			ledger.Load().SetFaults(audit.Faults{
				Append: func(r *audit.Record) error {
					if r.Kind == audit.KindResult {
						resultAppended.Store(true)
					}
					return nil
				},
				Sync: func() error {
					if syncs.Add(1) == 1 {
						close(entered) // the call's first sync: hold it
						<-release
					}
					return nil
				},
			})
			conn := rawCall(t, h.socket, `{"tool":"run","args":{},"stream":`+fmt.Sprint(mode == "streamed")+`}`)
			waitClosed(t, entered, "the call's first sync")
			if mode == "buffered" {
				// Its first sync follows its result record: the command
				// ran and ended without waiting for its decision's sync.
				if !resultAppended.Load() {
					t.Fatal("the buffered call synced before its command ran: its first sync came before its result record")
				}
			} else {
				// The command runs while its decision's sync is held: it
				// opens the marker and, having printed it, closes it.
				w.waitEvents(t, 2, "the command's open and close of the marker while its decision's sync is held")
			}
			if n := pending(t, conn); n != 0 {
				t.Fatalf("%d bytes reached the client before the decision was durable", n)
			}
			released.Store(true)
			close(release)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("status %d %v: %s", resp.StatusCode, err, body)
			}
			if mode == "buffered" {
				var res api.CallResult
				if err := json.Unmarshal(body, &res); err != nil || !res.OK || res.Output == nil || *res.Output != "ran\n" {
					t.Fatalf("result %s %v", body, err)
				}
			} else {
				var kinds []string
				var out string
				for _, line := range bytes.Split(bytes.TrimSpace(body), []byte("\n")) {
					var ev api.Event
					if err := json.Unmarshal(line, &ev); err != nil {
						t.Fatalf("event %q: %v", line, err)
					}
					kinds = append(kinds, ev.Event)
					out += ev.Data
					if ev.Event == api.EventResult && !ev.OK {
						t.Fatalf("result event %s", line)
					}
				}
				if len(kinds) < 3 || kinds[0] != api.EventDecision || kinds[len(kinds)-1] != api.EventResult || out != "ran\n" {
					t.Fatalf("events %v, output %q: want decision, output, result", kinds, out)
				}
			}
			want := map[string]int32{"buffered": 1, "streamed": 2}[mode]
			if n := syncs.Load(); n != want {
				t.Errorf("%d syncs for a %s call, want %d", n, mode, want)
			}
		})
	}
}

// TestEffectFreeExecuteSyncFails: when the decision of an execute call
// without egress, which runs while that decision syncs, cannot be made
// durable, the call ends audit_unavailable and none of its output
// leaves, buffered or streamed.
func TestEffectFreeExecuteSyncFails(t *testing.T) {
	testutil.RequireRoot(t)
	for _, mode := range []string{"buffered", "streamed"} {
		t.Run(mode, func(t *testing.T) {
			ledger := captureLedger(t)
			fx := escapetest.Build(t)
			testutil.Must(t, os.Chmod(fx.Base, 0o755))
			m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{
			  "run":{"operation":"execute","commands":[["sh","-c","echo out; echo err >&2"]],"pool":1}}}`)
			h := start(t, m, securefs.ModeAuto)
			if res, _ := h.call("run", map[string]any{}); !res.OK || res.Output == nil || *res.Output != "out\n" {
				t.Fatalf("control run: %+v", res)
			}
			ledger.Load().SetFaults(audit.Faults{Sync: func() error { return fmt.Errorf("injected: %w", unix.EIO) }})
			req := api.CallRequest{Tool: "run", Args: json.RawMessage(`{}`)}
			if mode == "buffered" {
				res, err := h.c.Call(context.Background(), req)
				if err != nil || res.OK || res.Reason != api.ReasonAuditUnavailable || res.Output != nil || res.OutputB64 != "" || res.Stderr != "" {
					t.Fatalf("result %+v %v, want audit_unavailable and no output", res, err)
				}
				return
			}
			var events []api.Event
			res, err := h.c.Stream(context.Background(), req, func(ev api.Event) error {
				events = append(events, ev)
				return nil
			})
			if err != nil || res.OK || res.Reason != api.ReasonAuditUnavailable || res.Stderr != "" {
				t.Fatalf("result %+v %v, want audit_unavailable", res, err)
			}
			for _, ev := range events {
				if ev.Event == api.EventOutput || ev.Data != "" || ev.DataB64 != "" {
					t.Errorf("output left without a durable decision: %s", ev.Raw)
				}
			}
		})
	}
}

// rawCall sends a call's request on a connection of its own and returns
// the connection, its response unread.
func rawCall(t *testing.T, socket, body string) net.Conn {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req := fmt.Sprintf("POST /v1/calls HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	return conn
}

// pending is how many bytes wait unread on conn, without reading them.
func pending(t *testing.T, conn net.Conn) int {
	t.Helper()
	rc, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var rerr error
	if err := rc.Control(func(fd uintptr) {
		n, rerr = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	}); err != nil || rerr != nil {
		t.Fatal(err, rerr)
	}
	return n
}

// waitClosed waits for ch to close, failing the test if that takes longer
// than any healthy run would.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30 s for %s", what)
	}
}

// waitEvents waits (blocking on the inotify fd) until at least n events
// of w were queued in all.
func (w *inotifyWatch) waitEvents(t *testing.T, n int, what string) {
	t.Helper()
	got := 0
	for got < n {
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		k, err := unix.Poll(fds, 30_000)
		if err == unix.EINTR {
			continue
		}
		if err != nil || k == 0 {
			t.Fatalf("%s: %d of %d events after 30 s: %v", what, got, n, err)
		}
		got += w.events()
	}
}

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

// Class 8: the directory fsync after a commit fails with EIO (through
// fileop.TestHookSyncDir, the one seam; the fsync is the only thing that
// fails). The write and the delete took effect, so the result and the
// ledger say so: ok, what was written or removed, durable:false and
// reason not_durable, where they used to say internal_error.
// docs/security.md, "The second review (Hardening II)", "Results say what happened"
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
