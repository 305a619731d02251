package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testutil"

	"github.com/sluicehq/sluice/api"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func openT(t *testing.T, path string) *Ledger {
	t.Helper()
	l, _, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func decision(i int) *Record {
	return &Record{Kind: KindDecision, CallID: fmt.Sprintf("c-%d", i), Tool: "read_file",
		Principal: &Principal{Name: "local", UID: 1000, GID: 1000, PID: int32(i)},
		Args:      json.RawMessage(fmt.Sprintf(`{"path":"ws/<&>\n\u2028%d"}`, i)), Verdict: "allow", Reason: "allowed"}
}

func verifyFile(t *testing.T, path string) (uint64, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return Verify(f)
}

func TestConcurrentAppendVerify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	const n = 400
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.AppendSync(decision(i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	syncs := l.syncs
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := verifyFile(t, path)
	if err != nil || got != n {
		t.Fatalf("verify: %d records, %v", got, err)
	}
	// Group commit: concurrent callers share syncs.
	t.Logf("%d durable appends took %d fdatasyncs", n, syncs)
	if syncs >= n {
		t.Fatalf("no group commit: %d syncs for %d appends", syncs, n)
	}
	// Reopen continues the chain.
	l = openT(t, path)
	if err := l.AppendSync(decision(n)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if got, err := verifyFile(t, path); err != nil || got != n+1 {
		t.Fatalf("after reopen: %d, %v", got, err)
	}
}

func writeLedger(t *testing.T, n int) (string, [][]byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	for i := range n {
		if err := l.AppendSync(decision(i)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	data, err := os.ReadFile(path)
	testutil.Must(t, err)
	return path, bytes.SplitAfter(data, []byte("\n"))[:n]
}

func TestTamperDetection(t *testing.T) {
	_, lines := writeLedger(t, 10)
	join := func(ls [][]byte) []byte { return bytes.Join(ls, nil) }
	clone := func() [][]byte {
		out := make([][]byte, len(lines))
		for i, l := range lines {
			out[i] = append([]byte(nil), l...)
		}
		return out
	}
	// Flip every byte position of record 5 in turn: each must be caught at seq 5.
	for pos := 0; pos < len(lines[4])-1; pos++ {
		ls := clone()
		ls[4][pos] ^= 0x01
		_, err := Verify(bytes.NewReader(join(ls)))
		var ve *VerifyError
		if !errors.As(err, &ve) || ve.Seq != 5 {
			t.Fatalf("flip at byte %d of seq 5 (%q): %v", pos, lines[4][pos], err)
		}
	}
	for name, mutate := range map[string]func([][]byte) [][]byte{
		"delete":        func(ls [][]byte) [][]byte { return append(ls[:4], ls[5:]...) },
		"reorder":       func(ls [][]byte) [][]byte { ls[4], ls[5] = ls[5], ls[4]; return ls },
		"duplicate":     func(ls [][]byte) [][]byte { return append(ls[:5], ls[4:]...) },
		"truncate head": func(ls [][]byte) [][]byte { return ls[4:] },
	} {
		ls := mutate(clone())
		_, err := Verify(bytes.NewReader(join(ls)))
		var ve *VerifyError
		if !errors.As(err, &ve) {
			t.Errorf("%s: not detected (%v)", name, err)
			continue
		}
		want := map[string]uint64{"delete": 5, "reorder": 5, "duplicate": 6, "truncate head": 1}[name]
		if ve.Seq != want {
			t.Errorf("%s: first bad seq %d, want %d", name, ve.Seq, want)
		}
	}
	// A re-hashed forgery of one record still breaks the next record's prev.
	ls := clone()
	var rec Record
	json.Unmarshal(ls[4], &rec)
	rec.Verdict = "deny"
	forged, _ := encode(&rec)
	ls[4] = forged
	_, err := Verify(bytes.NewReader(join(ls)))
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.Seq != 6 {
		t.Fatalf("re-hashed forgery: %v", err)
	}
}

func TestTornTailRecovery(t *testing.T) {
	path, lines := writeLedger(t, 5)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	testutil.Must(t, err)
	torn := lines[2][:len(lines[2])/2]
	f.Write(torn)
	f.Close()
	if _, err := verifyFile(t, path); err == nil {
		t.Fatal("torn line passed verify")
	}
	l, rec, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if rec.CutBytes != int64(len(torn)) || rec.LastSeq != 5 {
		t.Fatalf("recovery %+v", rec)
	}
	l.AppendSync(decision(99))
	l.Close()
	n, err := verifyFile(t, path)
	if err != nil || n != 7 {
		t.Fatalf("after recovery: %d, %v", n, err)
	}
	data, err := os.ReadFile(path)
	testutil.Must(t, err)
	if !strings.Contains(string(data), `"kind":"recovered"`) {
		t.Fatal("no recovered record")
	}
}

func TestTornOnlyRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	testutil.Must(t, os.WriteFile(path, []byte(`{"args":{"pa`), 0o600))
	l, rec, err := Open(path)
	if err != nil || rec.CutBytes == 0 {
		t.Fatalf("%+v %v", rec, err)
	}
	l.Close()
	if n, err := verifyFile(t, path); err != nil || n != 1 {
		t.Fatalf("%d %v", n, err)
	}
}

func TestCorruptTailRefused(t *testing.T) {
	path, _ := writeLedger(t, 3)
	data, err := os.ReadFile(path)
	testutil.Must(t, err)
	data[len(data)-20] ^= 1
	testutil.Must(t, os.WriteFile(path, data, 0o600))
	if _, _, err := Open(path); err == nil || !strings.Contains(err.Error(), "not intact") {
		t.Fatalf("a tampered last record was accepted: %v", err)
	}
}

func TestExclusiveLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	defer l.Close()
	if _, _, err := Open(path); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second open: %v", err)
	}
}

// TestENOSPC fills a tiny tmpfs: appends fail with ErrUnavailable, the
// file keeps only whole records, and appends work again once space frees.
func TestENOSPC(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	path := filepath.Join(dir, "audit.jsonl")
	l := openT(t, path)
	if err := l.AppendSync(decision(0)); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	out, err := exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=4k").CombinedOutput()
	if !strings.Contains(string(out), "No space left") {
		t.Fatalf("dd did not fill the tmpfs: %s %v", out, err)
	}
	failed := 0
	for i := range 50 {
		if err := l.AppendSync(decision(i)); err != nil {
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("error %v is not ErrUnavailable", err)
			}
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("no append failed on a full filesystem")
	}
	testutil.Must(t, os.Remove(filler))
	if err := l.AppendSync(decision(100)); err != nil {
		t.Fatalf("after freeing space: %v", err)
	}
	l.Close()
	if _, err := verifyFile(t, path); err != nil {
		t.Fatalf("ledger not whole after ENOSPC: %v", err)
	}
}

func TestSummary(t *testing.T) {
	s := Summary(&Record{Seq: 3, Kind: KindDecision, Tool: "read_file", Verdict: "deny", Reason: "outside_roots",
		Principal: &Principal{Name: "local", UID: 1}})
	for _, want := range []string{"3", "decision", "read_file", "deny", "outside_roots", "local(uid=1"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary %q lacks %q", s, want)
		}
	}
}

func BenchmarkAppendSync(b *testing.B) {
	l, _, err := Open(filepath.Join(b.TempDir(), "audit.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	rec := decision(1)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := *rec
			if err := l.AppendSync(&r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestEncodeMatchesEncodingJSON: the hand-written encoder writes exactly
// what encoding/json writes for a Record, for awkward values too.
func TestEncodeMatchesEncodingJSON(t *testing.T) {
	code := -9
	weird := []string{"", "plain", "quote\" back\\slash", "ctl\x00\x01\x1f\x7f", "nl\n\r\t\b\f", "<html>&amp;",
		"\u2028\u2029", "ünïcödé €", "bad\xff\xfeutf8", "\xed\xa0\x80", strings.Repeat("x", 300)}
	for i, s := range weird {
		rec := &Record{Args: json.RawMessage(`{"path":"a"}`), CallID: s, Detail: s, Kind: s, Operation: api.Operation(s),
			PolicyVersion: s, Prev: s, Principal: &Principal{Cgroup: []string{"", s}[i%2], GID: 4294967295, Name: s, PID: -1, UID: 7}, Reason: api.Reason(s),
			Resolved: json.RawMessage(`[{"root":0}]`), Resource: s, Rule: s, Seq: uint64(i) << 40, Task: s, Time: s, Tool: s, Verdict: api.Verdict(s),
			Result: &Result{Bytes: -5, DurationMS: []float64{0, 0.217, 1e-7, 123456.789, 3e21}[i%5], ExitCode: &code, OK: i%2 == 0, SHA256: []string{"", "sha256:ab<&>"}[i%2], Signal: []string{"", s}[i%2], Size: int64(i % 3), Truncated: true, Durable: []*bool{nil, new(bool)}[i%2]}, ApprovalID: []string{"", "a-1"}[i%2]}
		if i%3 != 0 {
			rec.Token = &TokenRef{ID: "t-" + s, Minter: s, Subject: []string{"", s}[i%2]}
		}
		if i%3 == 0 {
			rec.Principal, rec.Result, rec.Args = nil, nil, nil
		}
		if i%2 == 1 {
			rec.Egress = &Egress{Addr: "192.0.2.1:443", BodyLen: int64(i), BodySHA256: s, BytesIn: -1, BytesOut: int64(i) << 33,
				ContentType: s, Hops: []EgressHop{{URL: s}, {Addr: "[2001:db8::1]:8443", Rule: s, Status: 302, URL: s}}, Method: s, Status: 200, Target: s}
		}
		rec.Grant = []string{"", "g-1"}[i%2]
		want, _ := json.Marshal(rec)
		want = bytes.Replace(want, []byte(`,"hash":""}`), []byte("}"), 1)
		got := append(appendRecord(nil, rec), '}')
		if !bytes.Equal(got, want) {
			t.Errorf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// TestGroupCommitFailure: a sync that fails while callers wait for the
// next one ends every wait with ErrUnavailable (none hangs, none is told
// its record is durable), and a caller told nil has its record covered
// by a sync that succeeded.
func TestGroupCommitFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	var syncs atomic.Int64
	var okSeqMax atomic.Uint64 // the highest seq a successful sync covered
	l.SetFaults(Faults{Sync: func() error {
		if syncs.Add(1) > 1 {
			return errors.New("injected")
		}
		return nil
	}})
	const n = 200
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq, err := l.Append(decision(i))
			if err != nil {
				if !errors.Is(err, ErrUnavailable) {
					t.Error(err)
				}
				failed.Add(1)
				return
			}
			switch err := l.Sync(seq); {
			case err == nil:
				for {
					cur := okSeqMax.Load()
					if seq <= cur || okSeqMax.CompareAndSwap(cur, seq) {
						break
					}
				}
			case errors.Is(err, ErrUnavailable):
				failed.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	l.mu.Lock()
	synced, waiting := l.synced, len(l.waiters)
	l.mu.Unlock()
	if okSeqMax.Load() > synced {
		t.Errorf("a caller was told seq %d is durable; the last good sync covered %d", okSeqMax.Load(), synced)
	}
	if waiting != 0 {
		t.Errorf("%d waiters left parked", waiting)
	}
	if syncs.Load() > 1 && failed.Load() == 0 {
		t.Errorf("the failed sync failed nobody")
	}
	t.Logf("%d syncs, %d calls failed, synced up to %d", syncs.Load(), failed.Load(), synced)
	l.Close()
}

// TestLineBytes: LineBytes counted before an append is never less than
// what the append writes (the daemon's per-call audit budget rests on it).
func TestLineBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	defer l.Close()
	var want int64
	for i := range 20 {
		rec := decision(i)
		rec.Detail = strings.Repeat("<&>", i*10)
		n := LineBytes(rec)
		if _, err := l.Append(rec); err != nil {
			t.Fatal(err)
		}
		line, err := encode(rec)
		if err != nil || len(line) > n {
			t.Fatalf("record %d: %d bytes written, LineBytes said %d (%v)", i, len(line), n, err)
		}
		want += int64(len(line))
	}
	if st, err := os.Stat(path); err != nil || st.Size() != want {
		t.Fatalf("ledger %v bytes, records %d (%v)", st.Size(), want, err)
	}
}
