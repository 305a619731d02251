package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUnavailable means the ledger cannot take or keep a record: the caller
// must not run the call (fail closed).
var ErrUnavailable = errors.New("audit ledger unavailable")

// maxRecordBytes bounds one line; the daemon keeps args far below it.
const maxRecordBytes = 1 << 20

// Ledger appends hash-chained records to one file. It is safe for
// concurrent use.
type Ledger struct {
	path string

	mu       sync.Mutex
	cond     *sync.Cond
	f        *os.File
	size     int64  // bytes of whole records in the file
	seq      uint64 // last seq written
	prev     string // hash of the last record written
	synced   uint64 // last seq known durable
	syncing  bool
	broken   error  // set on a failed sync: nothing more is accepted
	syncs    uint64 // fdatasync calls made
	appended uint64 // records appended since Open

	now func() time.Time
}

// Recovery says what Open found at the end of an existing ledger.
type Recovery struct {
	CutBytes int64  // bytes of a torn last line that were cut
	LastSeq  uint64 // the last whole record's seq
}

// Open opens (creating with mode 0600) the ledger at path, takes an
// exclusive lock on it (two daemons never share a chain), checks the last
// whole record's own hash and cuts a torn last line. A recovered record is
// appended when something was cut.
func Open(path string) (*Ledger, Recovery, error) {
	var rec Recovery
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, rec, fmt.Errorf("open audit ledger: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, rec, fmt.Errorf("open audit ledger %s: locked by another process (is another sluiced running with this --state-dir?)", path)
		}
		return nil, rec, fmt.Errorf("lock audit ledger: %w", err)
	}
	l := &Ledger{path: path, f: f, prev: Genesis, now: time.Now}
	l.cond = sync.NewCond(&l.mu)
	if err := l.recoverTail(&rec); err != nil {
		f.Close()
		return nil, rec, err
	}
	rec.LastSeq = l.seq
	if rec.CutBytes > 0 {
		r := &Record{Kind: KindRecovered, Detail: fmt.Sprintf("cut %d bytes of a torn record after seq %d", rec.CutBytes, l.seq)}
		if err := l.AppendSync(r); err != nil {
			f.Close()
			return nil, rec, err
		}
	}
	return l, rec, nil
}

// recoverTail finds the last whole record, checks its hash, takes seq and
// prev from it and cuts anything after it.
func (l *Ledger) recoverTail(rec *Recovery) error {
	fi, err := l.f.Stat()
	if err != nil {
		return fmt.Errorf("stat audit ledger: %w", err)
	}
	size := fi.Size()
	if size == 0 {
		return nil
	}
	// Records are far smaller than maxRecordBytes, so the last whole line
	// and any torn tail fit in the last 2*maxRecordBytes.
	start := max(size-2*maxRecordBytes, 0)
	buf := make([]byte, size-start)
	if _, err := l.f.ReadAt(buf, start); err != nil && err != io.EOF {
		return fmt.Errorf("read audit ledger: %w", err)
	}
	end := bytes.LastIndexByte(buf, '\n') + 1 // whole records end here
	good := start + int64(end)
	if end == 0 && start > 0 {
		return fmt.Errorf("audit ledger %s: no record boundary in its last %d bytes; run 'sluice audit verify %s'", l.path, len(buf), l.path)
	}
	if good < size {
		if err := l.f.Truncate(good); err != nil {
			return fmt.Errorf("cut torn audit record: %w", err)
		}
		if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
			return fmt.Errorf("sync audit ledger: %w", err)
		}
		rec.CutBytes = size - good
	}
	l.size = good
	if end == 0 {
		return nil // only a torn first record: start afresh
	}
	lineStart := bytes.LastIndexByte(buf[:end-1], '\n') + 1
	if lineStart == 0 && start > 0 {
		return fmt.Errorf("audit ledger %s: last record longer than %d bytes", l.path, maxRecordBytes)
	}
	last, err := checkLine(buf[lineStart:end])
	if err != nil {
		return fmt.Errorf("audit ledger %s: last record is not intact (%v); the ledger was altered: keep it as evidence, run 'sluice audit verify %s', and start with a new --state-dir", l.path, err, l.path)
	}
	l.seq, l.synced, l.prev = last.Seq, last.Seq, last.Hash
	return nil
}

// Stats are counters since Open.
type Stats struct {
	Records uint64 // records appended
	Syncs   uint64 // fdatasync calls made
}

// Stats returns counters since Open: Records/Syncs is how well group
// commit amortizes the sync.
func (l *Ledger) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Records: l.appended, Syncs: l.syncs}
}

// Path is the ledger's file path.
func (l *Ledger) Path() string { return l.path }

// Append writes rec (seq, prev, time and hash are filled in) with one
// write(2) and returns its seq. The record is in the kernel but not yet
// durable: call Sync before letting anything that depends on it out.
func (l *Ledger) Append(rec *Record) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken != nil {
		return 0, l.broken
	}
	rec.Seq = l.seq + 1
	rec.Prev = l.prev
	rec.Time = l.now().UTC().Format(time.RFC3339Nano)
	line, err := encode(rec)
	if err != nil {
		return 0, fmt.Errorf("%w: encode: %v", ErrUnavailable, err)
	}
	if len(line) > maxRecordBytes {
		return 0, fmt.Errorf("%w: record of %d bytes exceeds %d", ErrUnavailable, len(line), maxRecordBytes)
	}
	n, err := l.f.Write(line)
	if err != nil || n != len(line) {
		// ENOSPC, EIO, a short write: take the partial line back so the
		// chain stays whole. If even that fails, stop accepting records.
		if terr := l.f.Truncate(l.size); terr != nil {
			l.broken = fmt.Errorf("%w: write failed (%v) and could not be undone (%v)", ErrUnavailable, err, terr)
			return 0, l.broken
		}
		if err == nil {
			err = io.ErrShortWrite
		}
		return 0, fmt.Errorf("%w: write: %v", ErrUnavailable, err)
	}
	l.size += int64(n)
	l.appended++
	l.seq = rec.Seq
	l.prev = rec.Hash
	return rec.Seq, nil
}

// Sync returns once every record up to seq is durable. Concurrent callers
// share one fdatasync: whoever arrives while a sync runs waits for the
// next one, which covers everything written by then (group commit). A
// failed sync poisons the ledger, since after a failed fsync the kernel
// may have dropped the dirty pages and a retry proves nothing.
func (l *Ledger) Sync(seq uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if l.synced >= seq {
			return nil
		}
		if l.broken != nil {
			return l.broken
		}
		if l.syncing {
			l.cond.Wait()
			continue
		}
		l.syncing = true
		target := l.seq
		l.mu.Unlock()
		err := unix.Fdatasync(int(l.f.Fd()))
		l.mu.Lock()
		l.syncs++
		l.syncing = false
		if err != nil {
			l.broken = fmt.Errorf("%w: fdatasync: %v", ErrUnavailable, err)
		} else if target > l.synced {
			l.synced = target
		}
		l.cond.Broadcast()
	}
}

// AppendSync appends rec and waits until it is durable.
func (l *Ledger) AppendSync(rec *Record) error {
	seq, err := l.Append(rec)
	if err != nil {
		return err
	}
	return l.Sync(seq)
}

// Close syncs and closes the ledger.
func (l *Ledger) Close() error {
	l.mu.Lock()
	seq := l.seq
	l.mu.Unlock()
	serr := l.Sync(seq)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.broken = fmt.Errorf("%w: closed", ErrUnavailable)
	cerr := l.f.Close()
	if serr != nil && !errors.Is(serr, ErrUnavailable) {
		return serr
	}
	return cerr
}
