//go:build linux

package recovery

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestLastStartOffset: the backward scan finds the end of the last start
// record whatever the read size, ignores a start record's text inside
// another record's args, and says 0 when there is none.
func TestLastStartOffset(t *testing.T) {
	defer func(n int) { ScanChunk = n }(ScanChunk)
	lines := []string{
		`{"detail":"start: /m.json","kind":"policy_loaded","seq":1}`,
		`{"call_id":"c-1","kind":"decision","operation":"write","seq":2}`,
		`{"detail":"start: /m.json","kind":"policy_loaded","seq":3}`,
		`{"call_id":"c-2","kind":"result","seq":4}`,
		`{"args":{"x":{"detail":"start: x","kind":"policy_loaded"}},"call_id":"c-3","kind":"decision","seq":5}`,
		`{"detail":"reload: /m.json","kind":"policy_loaded","seq":6}`,
	}
	content := strings.Join(lines, "\n") + "\n"
	want := int64(len(strings.Join(lines[:3], "\n")) + 1)
	p := filepath.Join(t.TempDir(), "l")
	testutil.Must(t, os.WriteFile(p, []byte(content), 0o600))
	f, err := os.Open(p)
	testutil.Must(t, err)
	defer f.Close()
	for _, chunk := range []int{1, 7, 64, 100, 1 << 20} {
		ScanChunk = chunk
		if got, err := lastStartOffset(f, int64(len(content))); err != nil || got != want {
			t.Errorf("chunk %d: %d, %v; want %d", chunk, got, err, want)
		}
		first := int64(len(lines[0]) + 1)
		if got, err := lastStartOffset(f, first); err != nil || got != first {
			t.Errorf("chunk %d, first record only: %d, %v; want %d", chunk, got, err, first)
		}
		if got, err := lastStartOffset(f, 0); err != nil || got != 0 {
			t.Errorf("chunk %d, empty: %d, %v", chunk, got, err)
		}
	}
}

// BenchmarkPendingWrites: the start-up scan over a ledger of 100,000
// calls (a decision and a result each, ~60 MB) with no start record in
// it, the worst case: read back to the beginning, then forward. Reports
// MB/s of ledger.
func BenchmarkPendingWrites(b *testing.B) {
	p := filepath.Join(b.TempDir(), "audit.jsonl")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := range 100_000 {
		id := fmt.Sprintf("c-01BENCH%018d", i)
		fmt.Fprintf(w, `{"args":{"content_bytes":4096,"mode":"overwrite","path":"workspace/src/pkg/file%d.go"},"call_id":"%s","kind":"decision","operation":"write","policy_version":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","prev":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","principal":{"gid":1000,"name":"agent","pid":4242,"uid":1000},"reason":"allowed","resolved":[{"root":0,"root_path":"workspace/src","outcome":"ok","path":"/srv/w/workspace/src/pkg/file%d.go","rel":"pkg/file%d.go","kind":"file"}],"resource":"/srv/w/workspace/src/pkg/file%d.go","rule":"tools.write_file","seq":%d,"time":"2026-12-03T08:00:00.000000000Z","tool":"write_file","verdict":"allow","hash":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`+"\n", i, id, i, i, i, 2*i)
		fmt.Fprintf(w, `{"call_id":"%s","kind":"result","policy_version":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","prev":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","principal":{"gid":1000,"name":"agent","pid":4242,"uid":1000},"reason":"allowed","resource":"/srv/w/workspace/src/pkg/file%d.go","result":{"bytes":0,"durable":true,"duration_ms":2.1,"ok":true,"sha256":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":4096,"truncated":false},"seq":%d,"time":"2026-12-03T08:00:00.000000000Z","tool":"write_file","verdict":"allow","hash":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`+"\n", id, i, 2*i+1)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	fi, _ := f.Stat()
	f.Close()
	b.SetBytes(fi.Size())
	for b.Loop() {
		pws, err := PendingWrites(p, map[api.Operation]TempName{api.OpWrite: func(id string) string { return fileop.TempPrefix + id }})
		if err != nil || len(pws) != 0 {
			b.Fatalf("%d pending, %v", len(pws), err)
		}
	}
}

func TestResultCallID(t *testing.T) {
	for line, want := range map[string]string{
		`{"call_id":"c-1","kind":"result","seq":2}`:                                    "c-1",
		`{"call_id":"c-2","detail":"a \"quoted\" \\ detail","kind":"result","seq":2}`:  "c-2",
		`{"call_id":"c-3","kind":"decision","seq":2}`:                                  "",
		`{"args":{"call_id":"c-4","kind":"result"},"call_id":"c-5","kind":"decision"}`: "",
		`{"call_id":"c-6","detail":"x\",\"kind\":\"result\"","kind":"decision"}`:       "",
		`{"call_id":"c\\"7","kind":"result"}`:                                          "",
		`{"call_id":"c-8","detail":"unterminated`:                                      "",
	} {
		got, ok := resultCallID([]byte(line))
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", line, got, ok, want)
		}
	}
}
