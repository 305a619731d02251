//go:build linux

package daemon

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/daemon/recovery"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestRecoverInterruptedWrites: the ledger holds allowed write decisions
// with no result (a crash mid-write) and their temp files exist beside
// their targets, one in a subdirectory. A start removes exactly those
// temp files, each through the resolver, and appends a recovered record
// naming the call; a temp-prefixed file no decision names stays. The scan
// stops at the last start record, and a clean stop lets the next start
// skip it. Run with the backward scan reading 64 bytes at a time, so that
// records straddle its reads.
func TestRecoverInterruptedWrites(t *testing.T) {
	testutil.RequireRoot(t)
	defer func(n int) { recovery.ScanChunk = n }(recovery.ScanChunk)
	recovery.ScanChunk = 64
	fx := escapetest.Build(t)
	m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{
	  "write_file":{"operation":"write","roots":["workspace/src"]}}}`)
	dir := t.TempDir()
	cfg := Config{Manifest: m, Socket: filepath.Join(dir, "s.sock"), StateDir: filepath.Join(dir, "state"),
		RunDir: filepath.Join(dir, "run"), Helper: testutil.Helper(t), Logger: slog.New(slog.NewJSONHandler(&testutil.LockedBuffer{}, nil))}
	src := filepath.Join(fx.Base, "workspace/src")
	ledgerPath := filepath.Join(cfg.StateDir, "audit.jsonl")

	// One real overwrite in src and one in src/sub, for real decision
	// records to copy.
	stop := launch(t, cfg)
	h := &harness{t: t, socket: cfg.Socket, stateDir: cfg.StateDir, c: client.New(cfg.Socket)}
	for _, p := range []string{"workspace/src/a.py", "workspace/src/sub/b.txt"} {
		if res := h.write(map[string]any{"path": p, "content": "v1\n"}); !res.OK {
			t.Fatalf("write %s: %+v", p, res)
		}
	}
	h.c.Close()
	stop()
	if !exists(filepath.Join(cfg.StateDir, recovery.CleanStopFile)) {
		t.Fatal("a clean stop left no marker")
	}

	// The crash: two write decisions without results, their temp files
	// made as the write would, and a decoy no record names.
	var decisions []audit.Record
	for _, line := range bytes.Split(bytes.TrimSpace(h.ledger()), []byte("\n")) {
		var r audit.Record
		testutil.Must(t, json.Unmarshal(line, &r))
		if r.Kind == audit.KindDecision && r.Operation == "write" {
			decisions = append(decisions, r)
		}
	}
	if len(decisions) != 2 {
		t.Fatalf("want 2 write decisions, got %d", len(decisions))
	}
	l, _, err := audit.Open(ledgerPath)
	testutil.Must(t, err)
	ids := []string{"c-01RECOVERTESTAAAAAAAAAAAAA", "c-01RECOVERTESTBBBBBBBBBBBBB"}
	temps := []string{filepath.Join(src, writeTempName(ids[0])), filepath.Join(src, "sub", writeTempName(ids[1]))}
	for i, r := range decisions {
		r.CallID, r.Seq, r.Prev, r.Hash = ids[i], 0, "", ""
		testutil.Must(t, l.AppendSync(&r))
		testutil.Must(t, os.WriteFile(temps[i], []byte("half"), 0o600))
	}
	testutil.Must(t, l.Close())
	decoy := filepath.Join(src, fileop.TempPrefix+"c-01NOTINTHELEDGERXXXXXXXXXX")
	testutil.Must(t, os.WriteFile(decoy, []byte("x"), 0o600))

	stop = launch(t, cfg)
	stop()
	for _, p := range temps {
		if exists(p) {
			t.Errorf("recovery left %s", p)
		}
	}
	if !exists(decoy) {
		t.Error("recovery removed a temp-prefixed file no decision names")
	}
	for _, want := range []string{"a.py", "sub/b.txt"} {
		if b, _ := os.ReadFile(filepath.Join(src, want)); string(b) != "v1\n" {
			t.Errorf("%s is %q, want the last committed content", want, b)
		}
	}
	led := string(h.ledger())
	for i, id := range ids {
		rel, _ := filepath.Rel(fx.Base, temps[i])
		rec := `"call_id":"` + id + `","detail":"removed the temp file of an interrupted write: ` + rel + `","kind":"recovered"`
		if strings.Count(led, rec) != 1 {
			t.Errorf("want one recovered record for %s (%s), ledger:\n%s", id, rel, led)
		}
	}

	// Bounded: the decisions above lie before the last start record now,
	// and a clean stop skips the scan; either way a file of that name made
	// later is not touched (no write of that call can run again).
	testutil.Must(t, os.WriteFile(temps[0], []byte("half"), 0o600))
	stop = launch(t, cfg)
	stop()
	os.Remove(filepath.Join(cfg.StateDir, recovery.CleanStopFile)) // no marker: the scan runs, to the last start
	stop = launch(t, cfg)
	stop()
	if !exists(temps[0]) {
		t.Error("the scan reached behind the last start record")
	}
	if n := strings.Count(string(h.ledger()), `"kind":"recovered"`); n != 2 {
		t.Errorf("%d recovered records, want 2", n)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// TestLegacyJournalSwept: a temp journal left by an older sluiced is
// swept once (what it lists as added and not done is removed, the rest
// stays) and removed.
func TestLegacyJournalSwept(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{
	  "write_file":{"operation":"write","roots":["workspace/src"]}}}`)
	dir := t.TempDir()
	cfg := Config{Manifest: m, Socket: filepath.Join(dir, "s.sock"), StateDir: filepath.Join(dir, "state"),
		RunDir: filepath.Join(dir, "run"), Helper: testutil.Helper(t), Logger: slog.New(slog.NewJSONHandler(&testutil.LockedBuffer{}, nil))}
	src := filepath.Join(fx.Base, "workspace/src")
	left, done := fileop.TempPrefix+"0123abcd", fileop.TempPrefix+"4567ef01"
	testutil.Must(t, os.WriteFile(filepath.Join(src, left), []byte("half"), 0o600))
	testutil.Must(t, os.WriteFile(filepath.Join(src, done), []byte("not ours any more"), 0o600))
	testutil.Must(t, os.MkdirAll(cfg.StateDir, 0o700))
	journal := filepath.Join(cfg.StateDir, legacyJournal)
	testutil.Must(t, os.WriteFile(journal, []byte(`{"op":"add","path":"workspace/src/`+left+`"}
{"op":"add","path":"workspace/src/`+done+`"}
{"op":"done","path":"workspace/src/`+done+`"}
{"op":"add","pa`), 0o600))
	stop := launch(t, cfg)
	stop()
	if exists(filepath.Join(src, left)) {
		t.Error("the journal's unfinished temp file is still there")
	}
	if !exists(filepath.Join(src, done)) {
		t.Error("a temp name the journal saw finished was removed")
	}
	if exists(journal) {
		t.Error("the old journal was not removed")
	}
}
