package audit

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testutil"
)

// crash stops l as a power cut would stop the machine, as far as the
// ledger can tell: no last sync, no checkpoint, files closed as they are.
// durable is the ledger's size that a checkpoint (or a sync of the ledger
// itself) made durable: a power cut may leave the disk copy anywhere from
// there on, so the tests cut it back to there, the worst case.
func crash(t *testing.T, l *Ledger) (durable int64) {
	t.Helper()
	l.stopCheckpoints()
	l.mu.Lock()
	durable = l.ckptSize
	l.mu.Unlock()
	l.closeFiles()
	return durable
}

func cutTo(t *testing.T, path string, size int64) {
	t.Helper()
	testutil.Must(t, os.Truncate(path, size))
}

// checkAnchored verifies the ledger at path and that it reaches its
// anchor: no record that a sync acknowledged is missing.
func checkAnchored(t *testing.T, path string) *Report {
	t.Helper()
	head, err := ReadAnchor(AnchorPath(path))
	testutil.Must(t, err)
	f, err := os.Open(path)
	testutil.Must(t, err)
	defer f.Close()
	rep, err := Check(f, []Anchor{head})
	if err != nil || len(rep.Behind) > 0 || len(rep.Truncations) > 0 {
		t.Fatalf("ledger after recovery: %+v %v", rep, err)
	}
	return rep
}

// TestRingRestoresLostTail: with a small ring that wraps many times under
// concurrent calls, every acknowledged record survives a power cut that
// leaves the ledger's disk copy at its last checkpoint: Open appends the
// rest from the ring, and a recovered record says so.
func TestRingRestoresLostTail(t *testing.T) {
	for _, cut := range []string{"at the checkpoint", "torn mid-record"} {
		t.Run(cut, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			l, _, err := OpenWith(path, Options{WALSize: 16 << 10})
			testutil.Must(t, err)
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 150 {
						if err := l.AppendSync(decision(g*1000 + i)); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			// No more checkpoints from here: the last records are only in
			// the ring and the ledger's page cache when the power goes.
			l.stopCheckpoints()
			for i := range 5 {
				testutil.Must(t, l.AppendSync(decision(9000+i)))
			}
			l.mu.Lock()
			laps, size, seq := l.walHead/l.walRing, l.size, l.seq
			l.mu.Unlock()
			if laps < 3 {
				t.Fatalf("the ring went round %d times: the test does not exercise reuse", laps)
			}
			durable := crash(t, l)
			if durable >= size {
				t.Fatalf("nothing after the last checkpoint (%d of %d bytes): the test proves nothing", durable, size)
			}
			if cut == "torn mid-record" {
				durable += 100 // part of the next record made it to disk
			}
			cutTo(t, path, durable)

			l, rec, err := Open(path)
			testutil.Must(t, err)
			if rec.Replayed == 0 || rec.ReplayedTo != seq || rec.Truncated != nil {
				t.Fatalf("recovery: %+v (last acknowledged seq %d)", rec, seq)
			}
			testutil.Must(t, l.Close())
			rep := checkAnchored(t, path)
			want := seq + 1 // the recovered record
			if cut == "torn mid-record" {
				want++ // and the one saying what was cut
				if rec.CutBytes != 100 {
					t.Errorf("cut %d bytes, want the torn 100", rec.CutBytes)
				}
			}
			if rep.LastSeq != want {
				t.Fatalf("ledger ends at %d, want %d", rep.LastSeq, want)
			}
			b, _ := os.ReadFile(path)
			if !bytes.Contains(b, []byte("appended from the ring")) {
				t.Fatal("no recovered record names the ring")
			}
		})
	}
}

// TestRingCutTailRestored: records cut from the file while sluiced was
// stopped, the ring left alone, are appended back, not lost.
func TestRingCutTailRestored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	for i := range 5 {
		testutil.Must(t, l.AppendSync(decision(i)))
	}
	testutil.Must(t, l.Close())
	cutLines(t, path, 2)
	l, rec, err := Open(path)
	testutil.Must(t, err)
	testutil.Must(t, l.Close())
	if rec.Replayed != 2 || rec.Truncated != nil {
		t.Fatalf("recovery: %+v", rec)
	}
	checkAnchored(t, path)
}

// TestRingOfAnotherLedger: a ring left beside a ledger that was removed
// (a new chain from genesis) is not replayed into the new ledger, whose
// first records would otherwise chain on from genesis just the same.
func TestRingOfAnotherLedger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	for i := range 3 {
		testutil.Must(t, l.AppendSync(decision(i)))
	}
	crash(t, l)
	testutil.Must(t, os.Remove(path))
	testutil.Must(t, os.Remove(AnchorPath(path)))
	l, rec, err := Open(path)
	testutil.Must(t, err)
	testutil.Must(t, l.Close())
	if rec.Replayed != 0 {
		t.Fatalf("a stale ring was replayed into a new ledger: %+v", rec)
	}
	if n, err := verifyFile(t, path); err != nil || n != 0 {
		t.Fatalf("new ledger: %d records, %v", n, err)
	}
}

// TestRingTornFrame: a frame whose bytes do not match its CRC (torn by a
// power cut) is not replayed, nor anything after it.
func TestRingTornFrame(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	for i := range 4 {
		testutil.Must(t, l.AppendSync(decision(i)))
	}
	durable := crash(t, l)
	cutTo(t, path, durable)
	ring, err := os.ReadFile(WALPath(path))
	testutil.Must(t, err)
	// The frames are the ring's first bytes, one record each; spoil the
	// third one's payload.
	recs := walRecords(ring[walHeaderLen:], 0)
	if len(recs) != 4 {
		t.Fatalf("%d records in the ring, want 4", len(recs))
	}
	i := bytes.Index(ring, recs[2].line)
	ring[i+10] ^= 1
	testutil.Must(t, os.WriteFile(WALPath(path), ring, 0o600))
	l, rec, err := Open(path)
	testutil.Must(t, err)
	testutil.Must(t, l.Close())
	if rec.Replayed != 2 || rec.Truncated == nil || rec.Truncated.LastSeq != 2 {
		t.Fatalf("recovery: %+v", rec)
	}
}

// TestRingFallbacks: a batch larger than half the ring, and a ring that
// fails, send the sync to the ledger itself; nothing acknowledged is lost
// and the calls go on.
func TestRingFallbacks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, _, err := OpenWith(path, Options{WALSize: 16 << 10})
	testutil.Must(t, err)
	big := decision(1)
	big.Detail = strings.Repeat("x", 40<<10) // the ring is at least 64 KiB
	testutil.Must(t, l.AppendSync(big))
	l.mu.Lock()
	if l.ckptSize != l.size {
		t.Errorf("a batch larger than half the ring was not synced in the ledger (durable %d of %d)", l.ckptSize, l.size)
	}
	l.mu.Unlock()
	l.walW.Close() // the ring's writes now fail (EBADF)
	testutil.Must(t, l.AppendSync(decision(2)))
	testutil.Must(t, l.Health())
	l.mu.Lock()
	off, durable, size := l.walOff, l.ckptSize, l.size
	l.mu.Unlock()
	if !off || durable != size {
		t.Fatalf("after the ring failed: off %v, durable %d of %d", off, durable, size)
	}
	testutil.Must(t, l.AppendSync(decision(3)))
	testutil.Must(t, l.Close())
	checkAnchored(t, path)
}

// TestRingIsPreWritten: the ring's blocks are there (not a sparse hole)
// and its size never changes after Open, which is what keeps a frame's
// fdatasync free of metadata.
func TestRingIsPreWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	fi, err := os.Stat(WALPath(path))
	testutil.Must(t, err)
	for i := range 50 {
		testutil.Must(t, l.AppendSync(decision(i)))
	}
	testutil.Must(t, l.Close())
	fi2, err := os.Stat(WALPath(path))
	testutil.Must(t, err)
	if fi.Size() != walHeaderLen+DefaultWALSize || fi2.Size() != fi.Size() {
		t.Fatalf("ring size %d then %d, want %d", fi.Size(), fi2.Size(), walHeaderLen+DefaultWALSize)
	}
	var fs unix.Statfs_t
	testutil.Must(t, unix.Statfs(filepath.Dir(path), &fs))
	if fs.Type == unix.EXT4_SUPER_MAGIC && !l.walDirect {
		t.Error("on ext4 the ring's frames are not written with O_DIRECT|O_DSYNC")
	}
	if blocks := statBlocks(t, WALPath(path)); blocks*512 < fi.Size() {
		t.Fatalf("ring has %d bytes of blocks for %d bytes: not written through", blocks*512, fi.Size())
	}
}

func statBlocks(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	testutil.Must(t, unix.Stat(path, &st))
	return st.Blocks
}

// Review findings on the write-ahead ring (hz/review6): each test fails
// on the code as merged and says what it shows.

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
// docs/security.md, "The sixth and seventh reviews" (the sixth)
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
// docs/security.md, "The sixth and seventh reviews" (the sixth)
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
// docs/security.md, "The sixth and seventh reviews" (the sixth)
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
// docs/security.md, "The sixth and seventh reviews" (the sixth)
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
// docs/security.md, "The sixth and seventh reviews" (the sixth)
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
// docs/security.md, "The sixth and seventh reviews" (the sixth)
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
// docs/security.md, "The sixth and seventh reviews" (the sixth)
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

// Second review of the write-ahead ring (hz/review7): each test fails on
// main as of 8efaba6 and says what it shows.

// TestReview7ShortRingNoPanic: openWAL slices data[walHeaderLen:] as soon
// as the header line parses, without checking that the file is longer
// than the header block (RingTail checks; openWAL does not). A ring
// shorter than 4 KiB whose first line is a valid header (a state dir
// copied onto a full disk, a ring cut by hand, an initWAL cut short)
// makes every start of sluiced panic: a crash loop, no calls served.
// docs/security.md, "The sixth and seventh reviews" (the seventh)
func TestReview7ShortRingNoPanic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	for i := range 3 {
		testutil.Must(t, l.AppendSync(decision(i)))
	}
	testutil.Must(t, l.Close())
	ring, err := os.ReadFile(WALPath(path))
	testutil.Must(t, err)
	short := ring[:len(walMagicText)+64] // the header line and a little more
	testutil.Must(t, os.WriteFile(WALPath(path), short, 0o600))
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("Open with a ring of %d bytes (a valid header, cut short) panicked: %v", len(short), p)
			}
		}()
		l, _, err := Open(path)
		testutil.Must(t, err)
		testutil.Must(t, l.Close())
	}()
}

// TestReview7ForgedAnchorMaxSeq: the anchor accepts seq maxSeq (2^63-1);
// a ledger behind it gets a truncated record at anchor seq + 1 = 2^63,
// which Open writes and acknowledges but which recoverTail, Read and
// verify refuse as "out of range": the next start of sluiced fails
// ("the ledger was altered ... start with a new --state-dir") and the
// ledger no longer verifies. The bound is checked where a seq is read,
// never where the ledger makes one.
// docs/security.md, "The sixth and seventh reviews" (the seventh)
func TestReview7ForgedAnchorMaxSeq(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	testutil.Must(t, l.AppendSync(decision(1)))
	testutil.Must(t, l.Close())
	a := Anchor{Seq: maxSeq, Size: 1 << 20, Hash: Genesis}
	slot := a.encode()
	testutil.Must(t, os.WriteFile(AnchorPath(path), append(slot, make([]byte, anchorSlot)...), 0o600))
	l, rec, err := Open(path)
	if err != nil {
		return // refused at once: fine
	}
	testutil.Must(t, l.Close())
	if _, err := verifyFile(t, path); err != nil {
		t.Fatalf("Open (truncated: %v) wrote a ledger that no longer verifies: %v", rec.Truncated != nil, err)
	}
	l, _, err = Open(path)
	if err != nil {
		t.Fatalf("the ledger Open wrote cannot be opened again: %v", err)
	}
	testutil.Must(t, l.Close())
}

// TestReview7AppendOnlyLedger: rewriteTail reopens the ledger O_WRONLY
// without O_APPEND. On a ledger marked append-only (chattr +a, a common
// hardening for an audit log, which sluiced only ever appends to) that
// open fails with EPERM and Open refuses the ledger: sluiced no longer
// starts where it did before 1efc559.
// docs/security.md, "The sixth and seventh reviews" (the seventh)
func TestReview7AppendOnlyLedger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	testutil.Must(t, l.AppendSync(decision(1)))
	testutil.Must(t, l.Close())
	setAppendOnly(t, path, true)
	defer setAppendOnly(t, path, false)
	l, _, err := Open(path)
	if err != nil {
		t.Fatalf("Open of an append-only (chattr +a) ledger: %v", err)
	}
	testutil.Must(t, l.AppendSync(decision(2)))
	testutil.Must(t, l.Close())
}

func setAppendOnly(t *testing.T, path string, on bool) {
	t.Helper()
	f, err := os.Open(path)
	testutil.Must(t, err)
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if on && (errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP)) {
		t.Skipf("SKIPPED: the file system of %s has no inode flags (chattr): %v", path, err)
	}
	testutil.Must(t, err)
	if on {
		flags |= fsAppendFL
	} else {
		flags &^= fsAppendFL
	}
	testutil.Must(t, unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags)))
}

const fsAppendFL = 0x20 // FS_APPEND_FL, linux/fs.h

// TestFailedCheckpointKeepsRingAside: after a checkpoint's fdatasync
// fails, the ring may hold the only durable copy of records the kernel
// kept as clean, unwritten pages of the ledger (review 6, F2; and the
// only protection for an append-only ledger, whose tail cannot be
// rewritten at start). It is moved aside, the ledger takes no more
// records, and the next start makes a new ring and leaves the old one.
// docs/security.md, "The sixth and seventh reviews" (the seventh)
func TestFailedCheckpointKeepsRingAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	testutil.Must(t, l.AppendSync(decision(1)))
	l.SetFaults(Faults{Checkpoint: func() error { return unix.EIO }})
	l.mu.Lock()
	l.startCheckpointLocked()
	l.mu.Unlock()
	l.ckptWG.Wait()
	if err := l.AppendSync(decision(2)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("append after a failed checkpoint: %v", err)
	}
	l.Close()
	aside, _ := filepath.Glob(WALPath(path) + ".failed-*")
	if len(aside) != 1 {
		t.Fatalf("ring kept aside: %v", aside)
	}
	if _, err := os.Stat(WALPath(path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the ring is still in place: %v", err)
	}
	l, _, err := Open(path)
	testutil.Must(t, err)
	testutil.Must(t, l.AppendSync(decision(3)))
	testutil.Must(t, l.Close())
	if _, err := os.Stat(aside[0]); err != nil {
		t.Fatalf("the kept ring is gone after a restart: %v", err)
	}
	if _, err := verifyFile(t, path); err != nil {
		t.Fatal(err)
	}
}

// TestRingTailRefusesFIFO: 'sluice audit verify' on a copy where
// audit.wal is a FIFO (or a symlink) neither hangs nor follows it.
// docs/security.md, "The sixth and seventh reviews" (the seventh)
func TestRingTailRefusesFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openT(t, path)
	testutil.Must(t, l.AppendSync(decision(1)))
	testutil.Must(t, l.Close())
	testutil.Must(t, os.Remove(WALPath(path)))
	testutil.Must(t, unix.Mkfifo(WALPath(path), 0o600))
	if _, err := RingTail(path, 1, Genesis); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("RingTail on a FIFO: %v", err)
	}
	testutil.Must(t, os.Remove(WALPath(path)))
	testutil.Must(t, os.Symlink(path, WALPath(path)))
	if _, err := RingTail(path, 1, Genesis); err == nil {
		t.Fatal("RingTail followed a symlink")
	}
}
