package audit

// The ledger's types and errors, on every platform: the writer itself
// (ledger_linux.go) needs Linux, while reading and verifying a ledger
// (verify.go, anchor.go) works anywhere, e.g. "sluice audit verify" on a
// Mac against a copy of the file.

import (
	"errors"
	"fmt"
	"log/slog"
)

// ErrUnavailable means the ledger cannot take or keep a record: the caller
// must not run the call (fail closed).
var ErrUnavailable = errors.New("audit ledger unavailable")

// maxRecordBytes bounds one line; the daemon keeps args far below it.
const maxRecordBytes = 1 << 20

// maxSeq bounds a record's seq. No ledger gets near it; a larger one was
// forged, and taking it would wrap the sequence (the next seq 0, every
// Sync(seq) already "covered"), so the ledger, the anchor and the ring
// refuse it.
const maxSeq = 1<<63 - 1

// Options tune Open.
type Options struct {
	// Logger gets the head every few seconds (the journal's copy of the
	// anchor), truncations and reserve trouble. Nil discards.
	Logger *slog.Logger
	// Reserve is how many bytes the ledger keeps preallocated beyond its
	// end (fallocate FALLOC_FL_KEEP_SIZE), so that records, denials first
	// of all, can still be written when the file system is full. Zero
	// means DefaultReserve; negative, none.
	Reserve int64
	// WALSize is the write-ahead ring's size (wal.go): zero means
	// DefaultWALSize; negative, no ring (each sync fdatasyncs the ledger).
	WALSize int64
}

// DefaultReserve is the ledger's preallocated reserve: some ten thousand
// records.
const DefaultReserve = 4 << 20

// ErrDegraded means the ledger still records but is running on its
// reserve (its file system is full) or cannot keep one.
var ErrDegraded = errors.New("audit ledger degraded")

// Faults make the ledger fail on purpose, for tests of what its callers
// do then (the daemon's durability rule). Production code never sets
// them; unset, they cost one nil check.
type Faults struct {
	// Append, when it returns an error, fails the append of rec as a
	// failed write(2) would.
	Append func(rec *Record) error
	// Sync, when it returns an error, replaces fdatasync's result.
	Sync func() error
	// Checkpoint, when it returns an error, replaces the result of a
	// background checkpoint's fdatasync of the ledger.
	Checkpoint func() error
}

// Recovery says what Open found at the end of an existing ledger.
type Recovery struct {
	CutBytes int64  // bytes of a torn last line that were cut
	LastSeq  uint64 // the last whole record's seq
	// Truncated is set when the ledger was behind its anchor: a truncated
	// record was appended and the sequence continues past the anchor.
	Truncated *Truncation
	// AnchorErr is set when the anchor was missing beside a non-empty
	// ledger, or damaged: the ledger could not be checked against it.
	AnchorErr error
	// Replayed records, up to seq ReplayedTo, were appended from the
	// write-ahead ring: the ledger's copy on disk ended before its
	// durable head (the machine lost power or crashed).
	Replayed   int
	ReplayedTo uint64
	// WALErr is set when the write-ahead ring could not be set up: the
	// ledger works without it, each sync an fdatasync of the ledger.
	WALErr error
}

// Truncation is a ledger found behind its anchor.
type Truncation struct {
	Anchor   Anchor // what the anchor said
	LastSeq  uint64 // the last record left
	LastHash string
	// Replaced: the ledger reaches the anchored seq but the record there
	// is another one (records were cut and others written in their place).
	Replaced bool
}

func (t *Truncation) String() string {
	if t.Replaced {
		return fmt.Sprintf("ledger does not match its anchor: the anchor says seq %d has hash %s, the ledger holds another record there (last seq %d, hash %s); records were replaced",
			t.Anchor.Seq, t.Anchor.Hash, t.LastSeq, t.LastHash)
	}
	return fmt.Sprintf("ledger behind its anchor: the anchor says seq %d hash %s, the ledger ends at seq %d hash %s; %d records were cut",
		t.Anchor.Seq, t.Anchor.Hash, t.LastSeq, t.LastHash, t.Anchor.Seq-t.LastSeq)
}

// Stats are counters since Open.
type Stats struct {
	Records uint64 // records appended
	Syncs   uint64 // fdatasync calls made
}

// ErrUnsupported is what Open returns on a platform other than Linux: the
// writer's durability rests on flock, fallocate and fdatasync. It matches
// errors.ErrUnsupported too.
var ErrUnsupported = fmt.Errorf("sluice: audit ledger needs Linux (flock, fallocate, fdatasync): %w", errors.ErrUnsupported)
