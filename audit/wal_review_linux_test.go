package audit

// Review findings on the write-ahead ring (hz/review6): each test fails
// on the code as merged and says what it shows.

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testutil"
)

// ackedOnlyInRing opens a ledger at path with a small ring, makes n
// records durable with checkpoints stopped after the first half, and
// power-cuts it: the ledger's disk copy ends at its last checkpoint and
// the ring holds the rest. It returns the last acknowledged seq and how
// many records only the ring holds.
func ackedOnlyInRing(t *testing.T, path string, n int) (seq uint64, inRing int) {
	t.Helper()
	l, _, err := OpenWith(path, Options{WALSize: 64 << 10})
	testutil.Must(t, err)
	for i := range n / 2 {
		testutil.Must(t, l.AppendSync(decision(i)))
	}
	l.stopCheckpoints() // no checkpoint from here
	testutil.Must(t, l.syncLedger())
	for i := n / 2; i < n; i++ {
		testutil.Must(t, l.AppendSync(decision(i)))
	}
	l.mu.Lock()
	seq = l.seq
	l.mu.Unlock()
	cutTo(t, path, crash(t, l))
	return seq, n - n/2
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	testutil.Must(t, err)
	testutil.Must(t, os.WriteFile(to+".tmp", b, 0o600))
	testutil.Must(t, os.Rename(to+".tmp", to))
}

// TestReviewRingTailAgreesWithOpen: 'sluice audit verify' (RingTail)
// says the ring holds records that "the next start of sluiced appends",
// but RingTail does not check the ring's header against the ledger file
// while Open does: when the ledger was rewritten into a new file (cut with
// sed -i, restored from a copy), verify promises a replay that Open does
// not do (it resets the ring and appends a truncated record instead).
func TestReviewRingTailAgreesWithOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	for i := range 5 {
		testutil.Must(t, l.AppendSync(decision(i)))
	}
	testutil.Must(t, l.Close())
	// Cut the last two records the way sed -i does: a new file renamed
	// over the old one.
	b, err := os.ReadFile(path)
	testutil.Must(t, err)
	lines := bytes.SplitAfter(b, []byte("\n"))
	kept := bytes.Join(lines[:len(lines)-3], nil)
	testutil.Must(t, os.WriteFile(path+".new", kept, 0o600))
	testutil.Must(t, os.Rename(path+".new", path))
	last, err := checkLine(lines[len(lines)-4])
	testutil.Must(t, err)

	said, err := RingTail(path, last.Seq, last.Hash)
	testutil.Must(t, err)
	l, rec, err := Open(path)
	testutil.Must(t, err)
	testutil.Must(t, l.Close())
	if len(said) != rec.Replayed {
		t.Fatalf("verify's RingTail says the next start appends %d records from the ring; Open appended %d (truncated: %v)",
			len(said), rec.Replayed, rec.Truncated != nil)
	}
}

// TestReviewCopiedStateDirKeepsRing: docs/operating.md says to keep
// audit.jsonl, audit.anchor and audit.wal together when the ledger is
// copied. After a power cut the ring holds acknowledged records the
// ledger's disk copy lacks; a copy of the three (a new inode and birth
// time) has its ring reset, never replayed: the acknowledged records are
// lost and the copy opens as truncated.
func TestReviewCopiedStateDirKeepsRing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	seq, inRing := ackedOnlyInRing(t, path, 20)
	dst := filepath.Join(t.TempDir(), "audit.jsonl")
	for _, p := range [][2]string{{path, dst}, {AnchorPath(path), AnchorPath(dst)}, {WALPath(path), WALPath(dst)}} {
		copyFile(t, p[0], p[1])
	}
	l, rec, err := Open(dst)
	testutil.Must(t, err)
	testutil.Must(t, l.Close())
	if rec.Replayed != inRing || rec.ReplayedTo != seq || rec.Truncated != nil {
		t.Fatalf("copied state dir after a power cut: replayed %d of the %d acknowledged records only the ring held (to seq %d of %d); truncated: %v",
			rec.Replayed, inRing, rec.ReplayedTo, seq, rec.Truncated)
	}
}

// TestReviewDisabledRingStillReplays: a ledger opened with the ring
// turned off (WALSize < 0) after a power cut ignores the ring that holds
// its acknowledged records: they are lost (only the anchor, if its last
// write reached the disk, tells).
func TestReviewDisabledRingStillReplays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	seq, inRing := ackedOnlyInRing(t, path, 20)
	l, rec, err := OpenWith(path, Options{WALSize: -1})
	testutil.Must(t, err)
	testutil.Must(t, l.Close())
	if rec.Replayed != inRing || rec.ReplayedTo != seq {
		t.Fatalf("ring off after a power cut: replayed %d of the %d acknowledged records only the ring held; truncated: %v",
			rec.Replayed, inRing, rec.Truncated)
	}
}

// TestReviewCheckpointFollowsEveryFrame: a frame written while a
// checkpoint runs (one that read walHead before the frame) schedules no
// checkpoint: putFrame's timer case needs !ckptRun, and checkpoint does
// not look again when it ends. With no later frame the ledger is not
// fdatasynced "a second after a frame at the latest" (docs/audit.md) but
// only at the next frame or at Close. The running checkpoint is modelled
// by setting ckptRun as startCheckpointLocked does.
func TestReviewCheckpointFollowsEveryFrame(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	defer l.Close()
	l.mu.Lock()
	l.ckptRun = true // a checkpoint runs; it read walHead before the frame below
	l.mu.Unlock()
	testutil.Must(t, l.AppendSync(decision(1)))
	l.mu.Lock()
	l.checkpointDoneLocked(nil) // it ends, covering none of the frame
	pending := l.walHead > l.walSafe
	scheduled := l.ckptTimer || l.ckptRun
	l.mu.Unlock()
	if pending && !scheduled {
		t.Fatal("a frame is not covered by any checkpoint and none is scheduled: the ledger stays behind its ring until the next frame or Close")
	}
}

// TestReviewCraftedRingMemory: Open reads a ring of up to 256 MiB whole
// (DefaultWALSize is 2 MiB) and decodes every record of every frame whose
// last seq is past the ledger's, chained or not, before walTail picks the
// chain. A ring crafted (by root, sluiced stopped) full of tiny records
// that chain to nothing costs several times its size at Open.
func TestReviewCraftedRingMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 32 MiB ring")
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	testutil.Must(t, l.Close())
	id := identityOf(t, path)
	size := 32 << 20
	if s := os.Getenv("REVIEW_RING_MIB"); s != "" {
		mib, _ := strconv.Atoi(s)
		size = mib << 20
	}
	ring := make([]byte, 0, walHeaderLen+size)
	ring = append(ring, id.header()...)
	seq := uint64(1 << 40)
	for len(ring) < walHeaderLen+size-walAlign {
		var payload []byte
		first := seq
		for walFrameSize(len(payload))+200 < 64<<10 {
			line, err := encode(&Record{Kind: "x", Prev: Genesis, Seq: seq})
			testutil.Must(t, err)
			payload = append(payload, line...)
			seq++
		}
		ring = appendWALFrame(ring, first, seq-1, payload)
	}
	testutil.Must(t, os.WriteFile(WALPath(path), ring, 0o600))
	n := len(ring)
	ring = nil
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l, rec, err := Open(path)
	runtime.ReadMemStats(&after)
	testutil.Must(t, err)
	testutil.Must(t, l.Close())
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("ring %d bytes, %d crafted records: Open allocated %d MiB (replayed %d)", n, seq-(1<<40), alloc>>20, rec.Replayed)
	if alloc > 2*uint64(n) {
		t.Fatalf("Open of a %d MiB crafted ring allocated %d MiB: more than twice the file", n>>20, alloc>>20)
	}
}

// TestReviewRingSeqOverflow: a crafted ring (root, sluiced stopped)
// holding a truncated record with seq 2^64-1 that chains on from the
// ledger's last record is replayed (a truncated record may skip seqs);
// l.seq and l.synced become 2^64-1, the next record gets seq 0 and every
// Sync(seq) returns at once, since synced >= seq: for the whole run no
// record is made durable before its effect. (Appending the same line to
// audit.jsonl does the same through recoverTail: the bug is that no seq
// is bounded, the ring is one more way in.)
func TestReviewRingSeqOverflow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	for i := range 3 {
		testutil.Must(t, l.AppendSync(decision(i)))
	}
	l.mu.Lock()
	prev := l.prev
	l.mu.Unlock()
	testutil.Must(t, l.Close())
	id := identityOf(t, path)
	line, err := encode(&Record{Kind: KindTruncated, Prev: prev, Seq: math.MaxUint64, Detail: "crafted"})
	testutil.Must(t, err)
	ring := appendWALFrame(id.header(), math.MaxUint64, math.MaxUint64, line)
	ring = append(ring, make([]byte, walHeaderLen+DefaultWALSize-len(ring))...)
	testutil.Must(t, os.WriteFile(WALPath(path), ring, 0o600))

	l, rec, err := Open(path)
	testutil.Must(t, err)
	defer l.Close()
	// Healthy: a seq past maxSeq is not a record sluiced could have
	// written, so the ring's frame is not replayed at all; either way the
	// ledger's seq stays bounded and the next AppendSync syncs.
	if rec.Replayed != 0 {
		t.Errorf("a crafted record with seq 2^64-1 was replayed (%d records)", rec.Replayed)
	}
	l.mu.Lock()
	if l.seq >= maxSeq {
		t.Errorf("after Open the ledger's seq is %d, past maxSeq %d", l.seq, uint64(maxSeq))
	}
	l.mu.Unlock()
	before := l.Stats().Syncs
	testutil.Must(t, l.AppendSync(decision(9)))
	l.mu.Lock()
	seq, synced := l.seq, l.synced
	l.mu.Unlock()
	if l.Stats().Syncs == before {
		t.Fatalf("AppendSync returned with no sync at all (seq %d, synced %d): durability is off for this run", seq, synced)
	}
}

// TestReviewRingReplaysOversizeRecord: walTail takes any line whose own
// hash checks, of any length; sluiced never writes a record over
// maxRecordBytes, yet Open appends one from a crafted ring, and the
// ledger it leaves fails 'sluice audit verify' (line longer than the
// largest record) with sluiced's own recovered record after it.
func TestReviewRingReplaysOversizeRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	testutil.Must(t, l.AppendSync(decision(1)))
	l.mu.Lock()
	prev, seq := l.prev, l.seq
	l.mu.Unlock()
	testutil.Must(t, l.Close())
	id := identityOf(t, path)
	line, err := encode(&Record{Kind: KindDecision, Prev: prev, Seq: seq + 1, Detail: strings.Repeat("x", maxRecordBytes)})
	testutil.Must(t, err)
	ring := appendWALFrame(id.header(), seq+1, seq+1, line)
	testutil.Must(t, os.WriteFile(WALPath(path), ring, 0o600))
	l, rec, err := Open(path)
	testutil.Must(t, err)
	testutil.Must(t, l.Close())
	if _, err := verifyFile(t, path); err != nil {
		t.Fatalf("Open replayed %d records from the ring; the ledger no longer verifies: %v", rec.Replayed, err)
	}
}

// identityOf is the identity a ring must name to be the ledger at path's.
func identityOf(t *testing.T, path string) walIdentity {
	t.Helper()
	f, err := os.Open(path)
	testutil.Must(t, err)
	defer f.Close()
	id, err := ledgerIdentity(f)
	testutil.Must(t, err)
	return id
}
