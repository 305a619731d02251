package audit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The write-ahead ring's writer side (the format and the reasons are in
// wal.go).

// errRingFull: the frame does not fit before a checkpoint frees space;
// the syncer syncs the ledger itself instead, which frees the ring.
var errRingFull = errors.New("write-ahead ring full")

// openWAL opens the ring beside the ledger (before anything is appended
// in this Open) and brings the ledger up to it:
//
//   - the ledger's last ring's worth of bytes is written again, unchanged,
//     so that the fdatasync below puts on disk any record a failed
//     checkpoint left only in the page cache, marked clean (after a failed
//     writeback the kernel keeps the pages but forgets to write them, and a
//     new descriptor's fdatasync reports no error);
//   - the ring's records that continue the chain from the ledger's last
//     record are appended (a power cut left the ledger's disk copy behind;
//     ring.tail says when a ring may be replayed at all);
//   - the ledger is made durable, after which the ring may be overwritten
//     from its start: it is kept if it is this ledger's and of the
//     configured size, else written afresh. A ring turned off (size < 0)
//     is replayed all the same, then removed.
//
// A ring that cannot be set up leaves the ledger without one
// (rec.WALErr); an error is returned only when the ledger itself could not
// take or keep the records.
func (l *Ledger) openWAL(size int64, rec *Recovery) error {
	off := size < 0
	if size <= 0 {
		size = DefaultWALSize
	}
	size = max(size/walAlign*walAlign, 16*walAlign)
	id, idErr := ledgerIdentity(l.f)
	path := WALPath(l.path)
	flags := os.O_RDWR | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !off {
		flags |= os.O_CREATE
	}
	w, err := os.OpenFile(path, flags, 0o600)
	if err != nil && !(off && errors.Is(err, os.ErrNotExist)) {
		rec.WALErr = fmt.Errorf("open write-ahead ring: %w", err)
	}
	var data []byte
	if w != nil {
		var unread error
		data, unread = readWAL(w, size)
		if unread != nil {
			// Never wipe what may hold acknowledged records: keep it aside.
			aside := fmt.Sprintf("%s.unread-%d", path, l.now().UnixNano())
			l.log.Error("audit write-ahead ring not read: moved aside, a new one is made", "ring", path, "aside", aside, "err", unread)
			w.Close()
			w, data = nil, nil
			if err := os.Rename(path, aside); err != nil {
				rec.WALErr = fmt.Errorf("move the unread write-ahead ring aside: %w", err)
			} else if !off {
				if w, err = os.OpenFile(path, flags|os.O_EXCL, 0o600); err != nil {
					rec.WALErr = fmt.Errorf("create write-ahead ring: %w", err)
				}
			}
		}
	}
	r := parseRing(data, id, idErr)
	// Records only a ring held durably lie within a ring's worth of the
	// end, plus what was appended after its last frame (under half a
	// ring): twice the ring covers both.
	if err := l.rewriteTail(2 * max(int64(len(data)), walHeaderLen+size)); err != nil {
		if w != nil {
			w.Close()
		}
		return err
	}
	for _, wr := range r.tail(l.seq, l.prev) {
		if _, err := l.f.Write(wr.line); err != nil {
			if w != nil {
				w.Close()
			}
			return fmt.Errorf("%w: append records from the write-ahead ring: %w", ErrUnavailable, err)
		}
		l.size += int64(len(wr.line))
		l.seq, l.prev = wr.rec.Seq, wr.rec.Hash
		rec.Replayed++
		rec.ReplayedTo = wr.rec.Seq
	}
	if r.ok && !r.mine && rec.LastSeq == 0 && len(walRecords(r.frames, 0)) > 0 {
		l.log.Warn("audit write-ahead ring belongs to another ledger file and this ledger is empty (the ledger was removed or replaced): not replayed, written afresh", "ring", path)
	}
	// Whatever the ring holds, the ledger's disk copy holds it now: the
	// ring may be overwritten from its start.
	if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
		if w != nil {
			w.Close()
		}
		return fmt.Errorf("%w: fdatasync: %w", ErrUnavailable, err)
	}
	l.synced = l.seq
	l.ckptSize = l.size
	switch {
	case w == nil:
		return nil
	case off:
		w.Close()
		if err := os.Remove(path); err != nil {
			l.log.Warn("audit write-ahead ring turned off but not removed", "ring", path, "err", err)
		}
		return nil
	case idErr != nil:
		w.Close()
		rec.WALErr = idErr
		return nil
	}
	if !r.mine || int64(len(data)) != walHeaderLen+size {
		if err := initWAL(w, id, size); err != nil {
			w.Close()
			os.Remove(path) // nothing in it now: give the space back
			rec.WALErr = err
			return nil
		}
	}
	l.wal, l.walW, l.walRing = w, w, size
	// Frames go through a second descriptor that writes around the page
	// cache and returns once the data is on stable storage.
	if d, err := os.OpenFile(path, os.O_RDWR|unix.O_DIRECT|unix.O_DSYNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
		l.walW, l.walDirect = d, true
	}
	return nil
}

// rewriteTail writes the ledger's last n bytes again, unchanged, so that
// the next fdatasync writes them whatever the page cache thinks of them
// (openWAL says why).
func (l *Ledger) rewriteTail(n int64) error {
	n = min(n, l.size)
	if n == 0 {
		return nil
	}
	buf := make([]byte, n)
	if _, err := l.f.ReadAt(buf, l.size-n); err != nil {
		return fmt.Errorf("%w: read the ledger's tail: %w", ErrUnavailable, err)
	}
	// The ledger's descriptor appends (O_APPEND): a second one writes in
	// place. It is opened through the first, never by path.
	d, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", l.f.Fd()), os.O_WRONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EPERM) {
		// An append-only ledger (chattr +a) cannot be written in place.
		// A failed checkpoint keeps its ring aside instead (checkpointDoneLocked).
		l.log.Info("audit ledger is append-only: its tail is not rewritten at start", "ledger", l.path)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: reopen the ledger to rewrite its tail: %w", ErrUnavailable, err)
	}
	defer d.Close()
	if _, err := d.WriteAt(buf, l.size-n); err != nil {
		return fmt.Errorf("%w: rewrite the ledger's tail: %w", ErrUnavailable, err)
	}
	return nil
}

// initWAL writes the ring afresh: the header, then zeros over the whole
// ring, so that every later frame overwrites blocks already written
// inside the file's size (the point of the ring).
func initWAL(w *os.File, id walIdentity, size int64) error {
	if err := w.Truncate(0); err != nil {
		return fmt.Errorf("reset write-ahead ring: %w", err)
	}
	buf := make([]byte, 1<<20)
	copy(buf, id.header())
	for off := int64(0); off < walHeaderLen+size; {
		n := min(int64(len(buf)), walHeaderLen+size-off)
		if _, err := w.WriteAt(buf[:n], off); err != nil {
			return fmt.Errorf("write write-ahead ring: %w", err)
		}
		if off == 0 {
			clear(buf[:walHeaderLen])
		}
		off += n
	}
	if err := w.Sync(); err != nil {
		return fmt.Errorf("sync write-ahead ring: %w", err)
	}
	return syncDir(filepath.Dir(w.Name()))
}

// putFrame writes the batch of lines (records first..last) as one frame
// and makes it durable. errRingFull, or any failure of the ring (which
// then stays off), tells the syncer to sync the ledger itself: the lines
// are in the ledger already, and a failed fdatasync of the ring says
// nothing about the ledger's pages.
func (l *Ledger) putFrame(batch []byte, first, last uint64) error {
	n := int64(walFrameSize(len(batch)))
	l.mu.Lock()
	v := l.walHead
	if off := v % l.walRing; off+n > l.walRing {
		v += l.walRing - off // to the next lap: a frame never wraps
	}
	if n > l.walRing/2 || v+n-l.walSafe > l.walRing {
		l.mu.Unlock()
		return errRingFull
	}
	l.walHead = v + n
	l.mu.Unlock()
	frame := appendWALFrame(l.frameBuf(int(n)), first, last, batch)
	wn, err := unix.Pwrite(int(l.walW.Fd()), frame, walHeaderLen+v%l.walRing)
	if err == nil && wn != len(frame) {
		err = io.ErrShortWrite
	}
	if err == nil && !l.walDirect {
		err = unix.Fdatasync(int(l.walW.Fd()))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.walOff = true
		l.log.Error("audit write-ahead ring failed: syncs go to the ledger itself from now on", "ring", l.wal.Name(), "direct", l.walDirect, "err", err)
		return err
	}
	if l.walHead-l.walSafe > l.walRing/4 {
		l.startCheckpointLocked()
	} else {
		// The timer's goroutine is counted in ckptWG only once it starts
		// a checkpoint; Close does not wait for the timer.
		l.scheduleCheckpointLocked()
	}
	return nil
}

// frameBuf returns the syncer's frame buffer, empty, with room for n
// bytes and aligned in memory to walAlign as O_DIRECT requires.
func (l *Ledger) frameBuf(n int) []byte {
	if cap(l.frame) < n {
		b := make([]byte, n+walAlign)
		off := 0
		if r := int(uintptr(unsafe.Pointer(&b[0])) % walAlign); r != 0 {
			off = walAlign - r
		}
		l.frame = b[off : off : off+n]
	}
	return l.frame[:0]
}

// syncLedger fdatasyncs the ledger; every frame written before it began
// then holds only durable records, so the ring is free up to there.
func (l *Ledger) syncLedger() error {
	l.mu.Lock()
	v, size := l.walHead, l.size
	l.mu.Unlock()
	if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
		return err
	}
	l.mu.Lock()
	l.walSafe, l.ckptSize = max(l.walSafe, v), max(l.ckptSize, size)
	l.mu.Unlock()
	return nil
}

// startCheckpointLocked starts a checkpoint in the background (l.mu
// held) unless one runs, the ring has nothing to free, or the ledger is
// closing.
func (l *Ledger) startCheckpointLocked() {
	if l.ckptRun || l.closed || l.walHead == l.walSafe {
		return
	}
	l.ckptRun = true
	l.ckptWG.Add(1)
	go l.checkpoint()
}

// checkpoint syncs the ledger to free the ring. A failure poisons the
// ledger as a failed sync does: the kernel may have dropped the ledger's
// dirty pages, so a later fdatasync proves nothing and the ring must not
// be overwritten.
func (l *Ledger) checkpoint() {
	defer l.ckptWG.Done()
	err := l.syncLedger()
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.faults.Checkpoint; f != nil && err == nil {
		err = f()
	}
	l.checkpointDoneLocked(err)
}

// checkpointDoneLocked ends a checkpoint (l.mu held).
func (l *Ledger) checkpointDoneLocked(err error) {
	l.ckptRun = false
	if err != nil && l.broken == nil {
		l.broken = fmt.Errorf("%w: fdatasync (checkpoint): %w", ErrUnavailable, err)
		// The ring may now hold the only durable copy of records the
		// kernel kept as clean but unwritten pages of the ledger: a
		// restart in this boot must not overwrite it. Kept aside, it
		// stays as evidence; the next start makes a new ring.
		aside := fmt.Sprintf("%s.failed-%d", WALPath(l.path), l.now().UnixNano())
		if rerr := os.Rename(WALPath(l.path), aside); rerr != nil {
			aside = "not moved: " + rerr.Error()
		}
		l.log.Error("audit ledger checkpoint failed: no more records are accepted; its write-ahead ring is kept aside", "err", err, "ring", aside)
	}
	if err == nil {
		// Frames written while it ran are not covered yet.
		l.scheduleCheckpointLocked()
	}
}

// scheduleCheckpointLocked (l.mu held) makes sure a checkpoint follows
// within walCheckpointEvery while the ring holds frames no checkpoint
// covered.
func (l *Ledger) scheduleCheckpointLocked() {
	if l.ckptTimer || l.ckptRun || l.closed || l.walHead == l.walSafe {
		return
	}
	l.ckptTimer = true
	time.AfterFunc(walCheckpointEvery, func() {
		l.mu.Lock()
		l.ckptTimer = false
		l.startCheckpointLocked()
		l.mu.Unlock()
	})
}
