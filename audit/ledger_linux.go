package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Ledger appends hash-chained records to one file. It is safe for
// concurrent use.
type Ledger struct {
	path string

	mu       sync.Mutex
	f        *os.File
	size     int64  // bytes of whole records in the file
	seq      uint64 // last seq written
	prev     string // hash of the last record written
	synced   uint64 // last seq known durable
	syncing  bool
	broken   error  // set on a failed sync: nothing more is accepted
	syncs    uint64 // fdatasync calls made
	appended uint64 // records appended since Open
	writeErr error  // the last append's failure, cleared by a success

	waiters []*syncWaiter // callers of Sync parked until a sync covers their seq

	anchor     *anchorFile
	anchorSync time.Time // when the anchor was last fdatasynced
	head       Anchor    // what the anchor holds
	logged     time.Time // when the head was last logged
	logPending bool      // a head log is scheduled
	log        *slog.Logger

	reserve    int64 // bytes to keep preallocated beyond the end (0: none)
	reserveEnd int64 // preallocated up to here
	reserveErr error // the last top-up's failure: running on the reserve
	reserveTry time.Time

	faults Faults

	// The write-ahead ring (wal.go). wal is nil when syncs go to the
	// ledger itself (the ring could not be set up, or failed). Only the
	// syncer writes frames; the head and safe offsets count ring bytes
	// over all laps, under mu.
	wal       *os.File // the ring, as read and set up at Open
	walW      *os.File // the descriptor frames are written through
	walDirect bool     // walW is O_DIRECT|O_DSYNC: a write is durable
	walOff    bool     // the ring failed: syncs go to the ledger
	walRing   int64    // the ring's bytes after its header
	walHead   int64    // where the next frame goes
	walSafe   int64    // frames before this are durable in the ledger: free
	frame     []byte
	pend      []byte // lines appended since the syncer last took them
	spare     []byte
	pendFirst uint64 // pend's first seq
	pendOver  bool   // pend outgrew the ring: the next sync syncs the ledger
	ckptSize  int64  // the ledger is durable up to here (tests)
	ckptRun   bool   // a checkpoint runs
	ckptTimer bool   // a checkpoint is scheduled
	closed    bool
	ckptWG    sync.WaitGroup

	now func() time.Time
}

// headLogEvery bounds how often the head goes to the log; anchorSyncEvery
// how often the anchor is fdatasynced on the sync path.
const (
	headLogEvery    = 5 * time.Second
	anchorSyncEvery = 5 * time.Second
	reserveRetry    = time.Second
	// walCheckpointEvery: the ledger is fdatasynced this long after a
	// ring frame at the latest, and at once when a quarter of the ring is
	// in use.
	walCheckpointEvery = time.Second
)

// SetFaults installs f (tests only).
func (l *Ledger) SetFaults(f Faults) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = f
}

// Open is OpenWith with the default Options.
func Open(path string) (*Ledger, Recovery, error) { return OpenWith(path, Options{}) }

// OpenWith opens (creating with mode 0600) the ledger at path, takes an
// exclusive lock on it (two daemons never share a chain), checks the last
// whole record's own hash and cuts a torn last line. A recovered record is
// appended when something was cut. It then compares the ledger with its
// anchor (AnchorPath): a ledger behind it gets a truncated record and its
// sequence continues past the anchored seq, so sequence numbers are never
// reused and the cut stays visible in the chain.
func OpenWith(path string, opts Options) (*Ledger, Recovery, error) {
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
	l := &Ledger{path: path, f: f, prev: Genesis, now: time.Now, log: opts.Logger}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if err := l.recoverTail(&rec); err != nil {
		f.Close()
		return nil, rec, err
	}
	rec.LastSeq = l.seq
	replayFirst := l.seq + 1
	if err := l.openWAL(opts.WALSize, &rec); err != nil {
		l.closeFiles()
		return nil, rec, err
	}
	if rec.WALErr != nil {
		l.log.Warn("audit write-ahead ring not in use: each sync goes to the ledger itself (slower, as durable)", "err", rec.WALErr)
	}
	af, head, aerr := openAnchorFile(AnchorPath(path))
	if af == nil {
		l.closeFiles()
		return nil, rec, aerr
	}
	l.anchor, l.anchorSync = af, l.now()
	switch {
	case aerr != nil:
		rec.AnchorErr = aerr
		l.log.Error("audit anchor damaged: cannot tell whether the newest records were cut; compare with the last 'audit head' in the journal",
			"anchor", AnchorPath(path), "err", aerr)
	case head.Seq == 0 && l.size > 0:
		rec.AnchorErr = fmt.Errorf("no audit anchor at %s beside a ledger of %d records", AnchorPath(path), l.seq)
		l.log.Warn("audit anchor missing (first start of a version that keeps one, or it was removed); compare the ledger with the last 'audit head' in the journal",
			"anchor", AnchorPath(path), "last_seq", l.seq)
	case head.Seq > 0:
		rec.Truncated = l.behind(head)
	}
	l.reserve = opts.Reserve
	if l.reserve == 0 {
		l.reserve = DefaultReserve
	}
	l.reserveEnd = l.size
	if l.reserve > 0 {
		if err := l.topUp(l.size); err != nil {
			if errors.Is(err, unix.EOPNOTSUPP) {
				l.log.Warn("the audit ledger's file system cannot preallocate: no reserve for a full disk", "err", err)
				l.reserve = 0
			} else {
				l.log.Error("audit ledger reserve not preallocated: a full disk will deny every call", "err", err, "reserve_bytes", l.reserve)
			}
		}
	}
	if t := rec.Truncated; t != nil {
		l.log.Error("audit ledger was cut: it is behind its anchor; appending a truncated record, the sequence continues past the anchor",
			"detail", t.String(), "anchor_seq", t.Anchor.Seq, "last_seq", t.LastSeq)
		l.seq = max(l.seq, t.Anchor.Seq) // the next record is anchored seq + 1
		r := &Record{Kind: KindTruncated, Detail: t.String()}
		if err := l.AppendSync(r); err != nil {
			l.closeFiles()
			return nil, rec, err
		}
	}
	if rec.AnchorErr != nil {
		// In the chain too, not only in the journal: removing or spoiling
		// the anchor is the cheap way to hide a cut.
		r := &Record{Kind: KindRecovered, Detail: fmt.Sprintf("ledger not checked against its anchor: %v; the anchor is rewritten from seq %d", rec.AnchorErr, l.seq)}
		if err := l.AppendSync(r); err != nil {
			l.closeFiles()
			return nil, rec, err
		}
	}
	if rec.CutBytes > 0 {
		r := &Record{Kind: KindRecovered, Detail: fmt.Sprintf("cut %d bytes of a torn record after seq %d", rec.CutBytes, rec.LastSeq)}
		if err := l.AppendSync(r); err != nil {
			l.closeFiles()
			return nil, rec, err
		}
	}
	if rec.Replayed > 0 {
		// After a power cut this is the ledger catching up; otherwise
		// somebody cut the file while sluiced was stopped. Either way the
		// records are back, and the chain says so.
		l.log.Warn("audit ledger ended before records its write-ahead ring held durable (the machine lost power, or the file was cut); appended them from the ring",
			"ledger_ended_at", rec.LastSeq, "restored", rec.Replayed, "ring", WALPath(path))
		r := &Record{Kind: KindRecovered, Detail: fmt.Sprintf("the ledger ended at seq %d, before records its write-ahead ring %s held durable (the machine lost power, or the file was cut): %d records, seq %d to %d, appended from the ring",
			rec.LastSeq, filepath.Base(WALPath(path)), rec.Replayed, replayFirst, rec.ReplayedTo)}
		if err := l.AppendSync(r); err != nil {
			l.closeFiles()
			return nil, rec, err
		}
	}
	if l.head.Seq != l.synced && l.synced > 0 {
		// An existing ledger with a missing or older anchor: anchor it now.
		if err := l.writeAnchor(Anchor{Seq: l.seq, Size: l.size, Hash: l.prev}, true); err != nil {
			l.closeFiles()
			return nil, rec, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	return l, rec, nil
}

// behind compares the ledger's tail with the anchored head: the ledger
// must reach head.Size and the record that ends there must be head's.
func (l *Ledger) behind(head Anchor) *Truncation {
	l.head = head
	t := &Truncation{Anchor: head, LastSeq: l.seq, LastHash: l.prev}
	if l.seq < head.Seq {
		return t
	}
	if l.size < head.Size {
		t.Replaced = true
		return t
	}
	start := max(head.Size-maxRecordBytes-1, 0)
	buf := make([]byte, head.Size-start)
	if _, err := l.f.ReadAt(buf, start); err != nil && err != io.EOF {
		t.Replaced = true
		return t
	}
	lineStart := 0
	if len(buf) > 1 {
		lineStart = bytes.LastIndexByte(buf[:len(buf)-1], '\n') + 1
	}
	r, err := checkLine(buf[lineStart:])
	if err != nil || r.Seq != head.Seq || r.Hash != head.Hash {
		t.Replaced = true
		return t
	}
	return nil
}

// topUp preallocates the reserve beyond off (the ledger's end). The
// blocks belong to the ledger file: an agent filling the disk cannot take
// them, unlike space freed by deleting a spare file when the disk fills.
func (l *Ledger) topUp(off int64) error {
	err := unix.Fallocate(int(l.f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, l.reserve)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reserveTry = l.now()
	if err != nil {
		l.reserveErr = fmt.Errorf("preallocate %d bytes: %w", l.reserve, err)
		return l.reserveErr
	}
	l.reserveEnd = max(l.reserveEnd, off+l.reserve)
	l.reserveErr = nil
	return nil
}

// writeAnchor stores head in the anchor (after the records it names are
// durable) and logs it at most every headLogEvery; sync forces an
// fdatasync of the anchor, which otherwise happens every anchorSyncEvery.
// Only the syncer, Open and Close call it.
func (l *Ledger) writeAnchor(head Anchor, sync bool) error {
	if err := l.anchor.write(head); err != nil {
		return err
	}
	now := l.now()
	if sync || now.Sub(l.anchorSync) >= anchorSyncEvery {
		if err := unix.Fdatasync(int(l.anchor.f.Fd())); err != nil {
			return fmt.Errorf("sync audit anchor: %w", err)
		}
		l.anchorSync = now
	}
	l.mu.Lock()
	l.head = head
	logNow, schedule := false, false
	switch {
	case now.Sub(l.logged) >= headLogEvery:
		l.logged, logNow = now, true
	case !l.logPending:
		l.logPending, schedule = true, true
	}
	l.mu.Unlock()
	if logNow {
		l.logHead(head)
	}
	if schedule {
		// Log the newest head once the interval has passed, so the
		// journal's last copy is never more than headLogEvery old.
		time.AfterFunc(headLogEvery-now.Sub(l.logged), func() {
			l.mu.Lock()
			h := l.head
			l.logPending, l.logged = false, l.now()
			l.mu.Unlock()
			l.logHead(h)
		})
	}
	return nil
}

func (l *Ledger) logHead(h Anchor) {
	l.log.Info("audit head", "seq", h.Seq, "hash", h.Hash, "head", fmt.Sprintf("%d:%s", h.Seq, h.Hash))
}

// stopCheckpoints lets no checkpoint start from here (a timer may still
// fire, and then does nothing) and waits for a running one.
func (l *Ledger) stopCheckpoints() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.ckptWG.Wait()
}

func (l *Ledger) closeFiles() {
	l.stopCheckpoints()
	if l.anchor != nil {
		l.anchor.f.Close()
	}
	l.closeWAL()
	l.f.Close()
}

func (l *Ledger) closeWAL() {
	if l.walW != nil && l.walW != l.wal {
		l.walW.Close()
	}
	if l.wal != nil {
		l.wal.Close()
	}
}

// Health is nil when the ledger records normally. It is an ErrUnavailable
// error when records cannot be written (a failed sync, the last append
// failed), and an ErrDegraded error when records are written but the
// ledger is running on its reserve because its file system is full.
func (l *Ledger) Health() error {
	l.mu.Lock()
	if l.broken == nil && l.writeErr == nil && l.reserve > 0 && l.reserveErr != nil && l.now().Sub(l.reserveTry) >= reserveRetry {
		// Space may have been freed with no call since to renew the
		// reserve: try now (health is asked off the call path), so an
		// idle daemon does not stay degraded (found by make soak).
		off := l.size
		l.mu.Unlock()
		l.topUp(off)
		l.mu.Lock()
	}
	defer l.mu.Unlock()
	switch {
	case l.broken != nil:
		return l.broken
	case l.writeErr != nil:
		return l.writeErr
	case l.reserve > 0 && l.reserveErr != nil:
		return fmt.Errorf("%w: running on its reserve, %d bytes left: %w", ErrDegraded, max(l.reserveEnd-l.size, 0), l.reserveErr)
	}
	// Off the call path: whether the file system still has room beyond
	// the reserve, so health turns degraded when the disk fills, before
	// the reserve is used up.
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(l.f.Fd()), &st); err == nil && l.reserve > 0 {
		if free := int64(st.Bavail) * st.Bsize; free < l.reserve/4 {
			return fmt.Errorf("%w: its file system is full (%d bytes free); records go to its reserve, %d bytes left: %w",
				ErrDegraded, free, max(l.reserveEnd-l.size, 0), unix.ENOSPC)
		}
	}
	return nil
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
	if err == nil && last.Seq > maxSeq {
		err = fmt.Errorf("seq %d is out of range", last.Seq)
	}
	if err != nil {
		return fmt.Errorf("audit ledger %s: last record is not intact (%v); the ledger was altered: keep it as evidence, run 'sluice audit verify %s', and start with a new --state-dir", l.path, err, l.path)
	}
	l.seq, l.synced, l.prev = last.Seq, last.Seq, last.Hash
	return nil
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
	if l.seq >= maxSeq {
		// Never write a seq that Open, Read and verify refuse.
		return 0, fmt.Errorf("%w: seq %d is the largest a ledger holds", ErrUnavailable, l.seq)
	}
	rec.Seq = l.seq + 1
	rec.Prev = l.prev
	rec.Time = l.now().UTC().Format(time.RFC3339Nano)
	if f := l.faults.Append; f != nil {
		if err := f(rec); err != nil {
			l.writeErr = fmt.Errorf("%w: write: %w", ErrUnavailable, err)
			return 0, l.writeErr
		}
	}
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
			l.broken = fmt.Errorf("%w: write failed (%w) and could not be undone (%w)", ErrUnavailable, err, terr)
			return 0, l.broken
		}
		l.reserveEnd = l.size // ftruncate dropped the preallocation
		if err == nil {
			err = io.ErrShortWrite
		}
		l.writeErr = fmt.Errorf("%w: write: %w", ErrUnavailable, err)
		return 0, l.writeErr
	}
	l.writeErr = nil
	if l.wal != nil && !l.walOff && !l.pendOver {
		if len(l.pend) == 0 {
			l.pendFirst = rec.Seq
		}
		if int64(len(l.pend)+len(line)) > l.walRing/2 {
			l.pendOver, l.pend = true, l.pend[:0]
		} else {
			l.pend = append(l.pend, line...)
		}
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
//
// A waiter is woken once: when a sync covers its seq (or the ledger
// broke), or to run the next sync itself, the syncer's role handed to it
// directly. Waking every waiter at the end of each sync, as a broadcast
// would, wakes those the sync did not cover only to park them again: on
// a VM each wake is a context switch, the read path's main CPU cost.
func (l *Ledger) Sync(seq uint64) error {
	l.mu.Lock()
	for {
		if l.synced >= seq {
			l.mu.Unlock()
			return nil
		}
		if l.broken != nil {
			err := l.broken
			l.mu.Unlock()
			return err
		}
		if !l.syncing {
			l.syncing = true
			break
		}
		w := waiterPool.Get().(*syncWaiter)
		w.seq, w.lead = seq, false
		l.waiters = append(l.waiters, w)
		l.mu.Unlock()
		<-w.ch
		lead := w.lead
		waiterPool.Put(w)
		l.mu.Lock()
		if lead && l.broken != nil {
			l.handOff() // the ledger broke meanwhile: nothing to sync
		} else if lead {
			break // l.syncing stays true: the role was handed over
		}
	}
	// This caller is the syncer: l.syncing is true and l.mu is held. Its
	// own record was appended before it got here, so the sync covers it.
	head := Anchor{Seq: l.seq, Size: l.size, Hash: l.prev}
	fault := l.faults.Sync
	topUp := l.reserve > 0 && l.reserveEnd-l.size < l.reserve/2 &&
		(l.reserveErr == nil || l.now().Sub(l.reserveTry) >= reserveRetry)
	anchored := l.head.Seq
	batch, first := l.pend, l.pendFirst
	toRing := l.wal != nil && !l.walOff && !l.pendOver && len(batch) > 0
	l.pend, l.pendOver = l.spare[:0], false
	l.mu.Unlock()
	var err error
	if toRing {
		err = l.putFrame(batch, first, head.Seq)
	}
	if !toRing || err != nil {
		err = l.syncLedger()
	}
	if fault != nil {
		if ferr := fault(); ferr != nil {
			err = ferr
		}
	}
	if err == nil && head.Seq > anchored {
		// The anchor names only durable records: the syncer writes it
		// once per batch, after the fdatasync that covered them.
		err = l.writeAnchor(head, false)
	}
	if err == nil && topUp {
		_ = l.topUp(head.Size) // failure: Health reports degraded
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spare = batch[:0]
	l.syncs++
	if err != nil {
		l.broken = fmt.Errorf("%w: fdatasync: %w", ErrUnavailable, err)
	} else if head.Seq > l.synced {
		l.synced = head.Seq
	}
	l.handOff()
	if l.synced >= seq {
		return nil
	}
	return l.broken
}

// handOff ends a sync (l.mu held): it wakes the waiters it covered (all of
// them once the ledger is broken) and hands the syncer's role to the first
// one it did not cover, or clears l.syncing when there is none.
func (l *Ledger) handOff() {
	var lead *syncWaiter
	next := l.waiters[:0]
	for _, w := range l.waiters {
		switch {
		case w.seq <= l.synced || l.broken != nil:
			w.ch <- struct{}{}
		case lead == nil:
			lead = w
		default:
			next = append(next, w)
		}
	}
	clear(l.waiters[len(next):])
	l.waiters = next
	if lead == nil {
		l.syncing = false
		return
	}
	lead.lead = true
	lead.ch <- struct{}{}
}

// syncWaiter is a caller of Sync parked until a sync covers seq, or until
// it is handed the syncer's role (lead).
type syncWaiter struct {
	seq  uint64
	lead bool
	ch   chan struct{} // buffered: the waker never blocks
}

var waiterPool = sync.Pool{New: func() any { return &syncWaiter{ch: make(chan struct{}, 1)} }}

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
	l.stopCheckpoints()
	if serr == nil && l.wal != nil {
		serr = l.syncLedger()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if serr == nil && l.synced > 0 && !l.syncing {
		if err := unix.Fdatasync(int(l.anchor.f.Fd())); err != nil && serr == nil {
			serr = fmt.Errorf("sync audit anchor: %w", err)
		}
		l.logHead(l.head)
	}
	l.broken = fmt.Errorf("%w: closed", ErrUnavailable)
	l.anchor.f.Close()
	l.closeWAL()
	cerr := l.f.Close()
	if serr != nil && !errors.Is(serr, ErrUnavailable) {
		return serr
	}
	return cerr
}
