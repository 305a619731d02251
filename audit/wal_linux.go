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

// ledgerIdentity names the ledger file: its inode and birth time.
func ledgerIdentity(f *os.File) (walIdentity, error) {
	var st unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_BTIME, &st); err != nil {
		return walIdentity{}, fmt.Errorf("statx audit ledger: %w", err)
	}
	id := walIdentity{Ino: st.Ino}
	if st.Mask&unix.STATX_BTIME != 0 {
		id.BirthSec, id.BirthNsec = st.Btime.Sec, st.Btime.Nsec
	}
	return id, nil
}

// openWAL opens the ring beside the ledger (before anything is appended
// in this Open), appends to the ledger the ring's records that chain on
// from its last record, makes the ledger durable, and sets the ring up
// for reuse: kept if it is this ledger's and of the configured size,
// else written afresh. A ring that cannot be set up leaves the ledger
// without one (rec.WALErr); an error is returned only when the ledger
// itself could not take or keep the records.
func (l *Ledger) openWAL(size int64, rec *Recovery) error {
	if size < 0 {
		return nil
	}
	if size == 0 {
		size = DefaultWALSize
	}
	size = max(size/walAlign*walAlign, 16*walAlign)
	id, err := ledgerIdentity(l.f)
	if err != nil {
		rec.WALErr = err
		return nil
	}
	path := WALPath(l.path)
	w, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		rec.WALErr = fmt.Errorf("open write-ahead ring: %w", err)
		return nil
	}
	var data []byte
	if fi, err := w.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() <= walMaxRead {
		data = make([]byte, fi.Size())
		if _, err := io.ReadFull(io.NewSectionReader(w, 0, fi.Size()), data); err != nil {
			data = nil
		}
	}
	hid, ok := parseWALHeader(data)
	mine := ok && hid == id
	if ok && !mine {
		l.log.Warn("audit write-ahead ring belongs to another ledger file (the ledger was replaced): not replayed, written afresh", "ring", path)
	}
	if mine && len(data) > walHeaderLen {
		for _, wr := range walTail(data[walHeaderLen:], l.seq, l.prev) {
			if _, err := l.f.Write(wr.line); err != nil {
				w.Close()
				return fmt.Errorf("%w: append records from the write-ahead ring: %w", ErrUnavailable, err)
			}
			l.size += int64(len(wr.line))
			l.seq, l.prev = wr.rec.Seq, wr.rec.Hash
			rec.Replayed++
			rec.ReplayedTo = wr.rec.Seq
		}
	}
	// Whatever the ring holds, the ledger's disk copy holds it now: the
	// ring may be overwritten from its start.
	if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
		w.Close()
		return fmt.Errorf("%w: fdatasync: %w", ErrUnavailable, err)
	}
	l.synced = l.seq
	if !mine || int64(len(data)) != walHeaderLen+size {
		if err := initWAL(w, id, size); err != nil {
			w.Close()
			os.Remove(path) // nothing in it: give the space back
			rec.WALErr = err
			return nil
		}
	}
	l.wal, l.walW, l.walRing = w, w, size
	// Frames go through a second descriptor that writes around the page
	// cache and returns once the data is on stable storage.
	if d, err := os.OpenFile(path, os.O_RDWR|unix.O_DIRECT|unix.O_DSYNC|unix.O_NOFOLLOW, 0); err == nil {
		l.walW, l.walDirect = d, true
	}
	l.ckptSize = l.size
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
	switch {
	case l.walHead-l.walSafe > l.walRing/4:
		l.startCheckpointLocked()
	case !l.ckptTimer && !l.ckptRun:
		l.ckptTimer = true
		// time.AfterFunc's goroutine is counted in ckptWG only once it
		// starts the checkpoint; Close does not wait for the timer.
		time.AfterFunc(walCheckpointEvery, func() {
			l.mu.Lock()
			l.ckptTimer = false
			l.startCheckpointLocked()
			l.mu.Unlock()
		})
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
	l.ckptRun = false
	if err != nil && l.broken == nil {
		l.broken = fmt.Errorf("%w: fdatasync (checkpoint): %w", ErrUnavailable, err)
		l.log.Error("audit ledger checkpoint failed: no more records are accepted", "err", err)
	}
}
