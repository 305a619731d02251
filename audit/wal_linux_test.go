package audit

import (
	"bytes"
	"os"
	"path/filepath"
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
