package audit

import (
	"encoding/binary"
	"testing"
)

// FuzzRingTail: whatever bytes a ring holds (root can write the state
// dir while sluiced is stopped, and a power cut tears frames), reading it
// does not panic, and what it would append to the ledger is only records
// that pass checkLine and continue the chain from where the ledger ends.
func FuzzRingTail(f *testing.F) {
	recs := chain(3)
	var ring []byte
	for i, r := range recs {
		line, err := encode(r)
		if err != nil {
			f.Fatal(err)
		}
		ring = appendWALFrame(ring, uint64(i+1), uint64(i+1), line)
	}
	f.Add(ring, uint64(0), 0)
	f.Add(ring, uint64(1), 1)
	f.Add(ring[:walAlign+40], uint64(0), 0)
	short := append([]byte(nil), ring[:walFrameHead]...)
	binary.LittleEndian.PutUint32(short[4:8], 1<<31)
	f.Add(short, uint64(0), 0)
	f.Fuzz(func(t *testing.T, ring []byte, seq uint64, at int) {
		hash := Genesis
		if at > 0 && at <= len(recs) {
			seq, hash = recs[at-1].Seq, recs[at-1].Hash
		}
		want, prev := seq, hash
		for _, wr := range walTail(ring, seq, hash) {
			r, err := checkLine(wr.line)
			if err != nil {
				t.Fatalf("replayed line fails its check: %v", err)
			}
			if r.Prev != prev || r.Seq <= want || (r.Seq != want+1 && r.Kind != KindTruncated) || r.Hash != wr.rec.Hash {
				t.Fatalf("replayed record %d (prev %s) does not continue %d (%s)", r.Seq, r.Prev, want, prev)
			}
			want, prev = r.Seq, r.Hash
		}
	})
}

// chain returns n records hash-chained from genesis, as the ledger writes
// them.
func chain(n int) []*Record {
	var out []*Record
	prev := Genesis
	for i := range n {
		r := decision(i)
		r.Seq, r.Prev, r.Time = uint64(i+1), prev, "2026-12-03T00:00:00Z"
		line, err := encode(r)
		if err != nil {
			panic(err)
		}
		c, err := checkLine(line)
		if err != nil {
			panic(err)
		}
		out = append(out, c)
		prev = c.Hash
	}
	return out
}
