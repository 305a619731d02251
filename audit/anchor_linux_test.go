package audit

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testutil"
)

func TestAnchorSlots(t *testing.T) {
	a := Anchor{Seq: 7, Size: 4242, Hash: Genesis[:len(Genesis)-1] + "7"}
	b := Anchor{Seq: 8, Size: 4500, Hash: Genesis[:len(Genesis)-1] + "8"}
	two := append(a.encode(), b.encode()...)
	if got, err := parseAnchor(two); err != nil || got != b {
		t.Fatalf("newer slot: %+v %v", got, err)
	}
	// A torn write of the newer slot: the older head is used.
	torn := bytes.Clone(two)
	copy(torn[anchorSlot+30:], "9999")
	if got, err := parseAnchor(torn); err != nil || got != a {
		t.Fatalf("torn newer slot: %+v %v, want the older head", got, err)
	}
	// Half a slot written over zeros (a torn first write) is detected.
	half := make([]byte, 2*anchorSlot)
	copy(half, b.encode()[:60])
	if _, err := parseAnchor(half); !errors.Is(err, ErrAnchorDamaged) {
		t.Fatalf("torn only slot: %v, want ErrAnchorDamaged", err)
	}
	both := bytes.Clone(two)
	both[20] ^= 1
	both[anchorSlot+20] ^= 1
	if _, err := parseAnchor(both); !errors.Is(err, ErrAnchorDamaged) {
		t.Fatalf("both torn: %v, want ErrAnchorDamaged", err)
	}
	if got, err := parseAnchor(make([]byte, 2*anchorSlot)); err != nil || got.Seq != 0 {
		t.Fatalf("empty anchor: %+v %v", got, err)
	}
	big := Anchor{Seq: maxSeq, Size: math.MaxInt64, Hash: a.Hash}
	if got, ok, err := decodeSlot(big.encode()); !ok || err != nil || got != big {
		t.Fatalf("the largest anchor does not fit its slot: %+v %v", got, err)
	}
	// A seq past maxSeq is forged: taking it would wrap the sequence.
	if _, ok, err := decodeSlot(Anchor{Seq: math.MaxUint64, Size: 1, Hash: a.Hash}.encode()); ok || err == nil {
		t.Fatal("an anchor with seq 2^64-1 was accepted")
	}
	if _, err := ParseHead("7:" + a.Hash); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"7", "x:" + a.Hash, "0:" + a.Hash, "7:sha256:12"} {
		if _, err := ParseHead(bad); err == nil {
			t.Errorf("ParseHead(%q) accepted", bad)
		}
	}
}

// cutLines removes the last n lines of the file at path.
func cutLines(t *testing.T, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	lines = lines[:len(lines)-1] // the empty piece after the last newline
	if err := os.WriteFile(path, bytes.Join(lines[:len(lines)-n], nil), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestOpenBehindAnchor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	for i := range 5 {
		if err := l.AppendSync(decision(i)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	head, err := ReadAnchor(AnchorPath(path))
	if err != nil || head.Seq != 5 {
		t.Fatalf("anchor after 5 records: %+v %v", head, err)
	}
	cutLines(t, path, 2)
	// Whoever cuts records removes them from the write-ahead ring too
	// (TestRingRestoresCutTail: else Open appends them again).
	testutil.Must(t, os.Remove(WALPath(path)))
	f, _ := os.Open(path)
	rep, err := Check(f, []Anchor{head})
	f.Close()
	if err != nil || len(rep.Behind) != 1 || !strings.Contains(rep.Behind[0], "2 records were cut") {
		t.Fatalf("check of a cut ledger: %+v %v", rep, err)
	}

	l, rec, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Truncated == nil || rec.Truncated.LastSeq != 3 || rec.Truncated.Anchor.Seq != 5 {
		t.Fatalf("recovery: %+v", rec)
	}
	seq, err := l.Append(decision(9))
	if err != nil || seq != 7 {
		t.Fatalf("next seq %d (%v), want 7: seq numbers are never reused", seq, err)
	}
	l.Close()
	f, _ = os.Open(path)
	rep, err = Check(f, []Anchor{head})
	f.Close()
	if err != nil || len(rep.Truncations) != 1 || rep.Truncations[0].Seq != 6 || rep.LastSeq != 7 {
		t.Fatalf("check after restart: %+v %v", rep, err)
	}
	if len(rep.Behind) != 1 || !strings.Contains(rep.Behind[0], "lost in a truncation") {
		t.Fatalf("old head not reported as lost: %v", rep.Behind)
	}
	if !strings.Contains(rep.Truncations[0].Detail, "seq 5") || !strings.Contains(rep.Truncations[0].Detail, "seq 3") {
		t.Fatalf("truncated detail does not say what was expected and found: %s", rep.Truncations[0].Detail)
	}
}

// TestOpenReplacedRecords: records cut and as many rewritten (a valid
// chain recomputed by whoever cut them) are caught by the anchored hash.
func TestOpenReplacedRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	for i := range 4 {
		l.AppendSync(decision(i))
	}
	l.Close()
	anchor, _ := os.ReadFile(AnchorPath(path))
	cutLines(t, path, 2)
	os.Remove(AnchorPath(path))
	os.Remove(WALPath(path))
	l = openT(t, path) // no anchor: the forger's daemon run
	for i := range 2 {
		l.AppendSync(decision(100 + i))
	}
	l.Close()
	os.WriteFile(AnchorPath(path), anchor, 0o600)
	_, rec, err := Open(path)
	if err != nil || rec.Truncated == nil || !rec.Truncated.Replaced {
		t.Fatalf("replaced records not found: %+v %v", rec, err)
	}
}

func TestFaultsAndHealth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	defer l.Close()
	if err := l.Health(); err != nil {
		t.Fatalf("fresh ledger: %v", err)
	}
	boom := errors.New("injected")
	l.SetFaults(Faults{Append: func(*Record) error { return boom }})
	if _, err := l.Append(decision(1)); !errors.Is(err, ErrUnavailable) || !errors.Is(err, boom) {
		t.Fatalf("append fault: %v", err)
	}
	if err := l.Health(); !errors.Is(err, boom) {
		t.Fatalf("health after a failed append: %v", err)
	}
	l.SetFaults(Faults{Sync: func() error { return boom }})
	if err := l.AppendSync(decision(2)); !errors.Is(err, boom) {
		t.Fatalf("sync fault: %v", err)
	}
	if err := l.Health(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("health after a failed sync: %v", err)
	}
	if a, _ := ReadAnchor(AnchorPath(path)); a.Seq != 0 {
		t.Fatalf("anchor names seq %d, which was never durable", a.Seq)
	}
}

// TestOpenAnchorMissing: a removed (or spoiled) anchor cannot be told
// from a first start of a version that keeps one, but it leaves a record
// in the chain, not only a line in the journal.
func TestOpenAnchorMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	l.AppendSync(decision(1))
	l.Close()
	for _, spoil := range []func(){
		func() { os.Remove(AnchorPath(path)) },
		func() { os.WriteFile(AnchorPath(path), bytes.Repeat([]byte("x"), 2*anchorSlot), 0o600) },
	} {
		spoil()
		l, rec, err := Open(path)
		if err != nil || rec.AnchorErr == nil {
			t.Fatalf("spoiled anchor not reported: %+v %v", rec, err)
		}
		l.Close()
		f, _ := os.Open(path)
		var last Record
		Read(f, func(r *Record) error { last = *r; return nil })
		f.Close()
		if last.Kind != KindRecovered || !strings.Contains(last.Detail, "anchor") {
			t.Fatalf("no recovered record: %+v", last)
		}
		if a, err := ReadAnchor(AnchorPath(path)); err != nil || a.Seq != last.Seq {
			t.Fatalf("anchor not rewritten: %+v %v", a, err)
		}
	}
}

// TestHealthRenewsReserve: once a full file system made the reserve's
// top-up fail, freeing space makes Health ok again by itself, with no
// record appended since (an idle daemon stayed degraded until some call
// came; found by make soak).
func TestHealthRenewsReserve(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	l, _, err := OpenWith(filepath.Join(dir, "audit.jsonl"), Options{Reserve: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var clock atomic.Int64
	l.now = func() time.Time { return time.Unix(clock.Load(), 0) }
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	f.Close()
	// Records go to the reserve until its top-up (below half) fails.
	for i := 0; ; i++ {
		seq, err := l.Append(&Record{Kind: KindDecision, CallID: fmt.Sprintf("c-%d", i), Detail: strings.Repeat("x", 400)})
		if err == nil {
			err = l.Sync(seq)
		}
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if h := l.Health(); errors.Is(h, ErrDegraded) && strings.Contains(h.Error(), "preallocate") {
			break
		}
		if i > 1000 {
			t.Fatal("the reserve's top-up never failed")
		}
	}
	testutil.Must(t, os.Remove(filler))
	clock.Add(int64(reserveRetry / time.Second))
	if err := l.Health(); err != nil {
		t.Errorf("health after space was freed, no record since: %v", err)
	}
}
