package audit

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The anchor holds the ledger's durable head (seq, hash, and the byte
// size of the ledger up to it) outside the ledger file, so that cutting
// the newest records while the daemon is stopped no longer goes
// unnoticed: the next start, and 'sluice audit verify', find the ledger
// behind its anchor (review finding 9).
//
// Format and cost. The anchor is written on the group-commit path of every
// effectful call, so it is not a temp file + fsync + rename + directory
// fsync (three syncs per batch). It is a preallocated file of two
// fixed-size text slots; the syncer writes the new head with one pwrite(2)
// into the slots alternately, after the ledger's fdatasync covered it, once
// per batch. Each slot carries a CRC-32C over its contents, so a torn slot
// is detected and the other slot (the previous head) is used. The anchor is
// not fdatasynced per batch: it is only ever written after the records it
// names are durable, so whatever state of it survives a power cut names a
// head at or before the durable ledger's, which Open and verify accept (a
// ledger ahead of its anchor is normal). The page cache is what another
// process, and the next start, read: a cut made after the daemon wrote the
// anchor is caught whether or not the anchor reached the disk. The anchor
// is fdatasynced at Close and at most every anchorSyncEvery.
type Anchor struct {
	Seq  uint64
	Size int64 // bytes of the ledger up to and including record Seq
	Hash string
}

const (
	anchorSlot  = 256 // the longest slot (20-digit seq and size) is 161 bytes
	anchorMagic = "sluice-audit-anchor 1"
)

// ErrAnchorDamaged means neither slot of an anchor file is intact.
var ErrAnchorDamaged = errors.New("audit anchor damaged")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// AnchorPath is where the anchor of the ledger at path lives:
// STATE_DIR/audit.anchor beside STATE_DIR/audit.jsonl.
func AnchorPath(ledgerPath string) string {
	return strings.TrimSuffix(ledgerPath, filepath.Ext(ledgerPath)) + ".anchor"
}

// encode renders a into one slot: text, space-padded, newline-terminated.
func (a Anchor) encode() []byte {
	body := fmt.Sprintf("%s seq=%d size=%d hash=%s", anchorMagic, a.Seq, a.Size, a.Hash)
	line := fmt.Sprintf("%s crc=%08x", body, crc32.Checksum([]byte(body), crcTable))
	b := bytes.Repeat([]byte{' '}, anchorSlot)
	copy(b, line)
	b[anchorSlot-1] = '\n'
	return b
}

// decodeSlot parses one slot. ok is false for an empty (all-zero) slot;
// err is set for a slot that is neither empty nor intact (torn).
func decodeSlot(b []byte) (a Anchor, ok bool, err error) {
	if len(bytes.Trim(b, "\x00")) == 0 {
		return a, false, nil
	}
	line := strings.TrimRight(string(b), " \n")
	i := strings.LastIndex(line, " crc=")
	if i < 0 {
		return a, false, errors.New("no checksum")
	}
	body := line[:i]
	crc, perr := strconv.ParseUint(line[i+len(" crc="):], 16, 32)
	if perr != nil || uint32(crc) != crc32.Checksum([]byte(body), crcTable) {
		return a, false, errors.New("checksum mismatch (torn or altered)")
	}
	var n int
	n, err = fmt.Sscanf(body, anchorMagic+" seq=%d size=%d hash=%s", &a.Seq, &a.Size, &a.Hash)
	if err != nil || n != 3 {
		return a, false, fmt.Errorf("unreadable slot: %v", err)
	}
	// The checksum catches a torn slot, not a forged one: what the slot
	// says is checked before anything sizes a read by it.
	if a.Size < 0 || a.Seq > maxSeq || !strings.HasPrefix(a.Hash, "sha256:") || len(a.Hash) != len(Genesis) {
		return a, false, fmt.Errorf("slot out of range: size %d, hash %.20q", a.Size, a.Hash)
	}
	return a, true, nil
}

// ReadAnchor reads the anchor file at path: the newer intact slot. A file
// with no written slot gives the zero Anchor; one whose written slots are
// all torn gives ErrAnchorDamaged. A missing file gives an error that
// matches os.ErrNotExist.
func ReadAnchor(path string) (Anchor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Anchor{}, fmt.Errorf("read audit anchor: %w", err)
	}
	return parseAnchor(b)
}

func parseAnchor(b []byte) (Anchor, error) {
	var best Anchor
	var found, written int
	var firstErr error
	for off := 0; off+anchorSlot <= len(b) && off < 2*anchorSlot; off += anchorSlot {
		a, ok, err := decodeSlot(b[off : off+anchorSlot])
		if err != nil {
			written++
			if firstErr == nil {
				firstErr = fmt.Errorf("slot %d: %v", off/anchorSlot, err)
			}
			continue
		}
		if ok {
			written++
			found++
			if a.Seq >= best.Seq {
				best = a
			}
		}
	}
	if written > 0 && found == 0 {
		return Anchor{}, fmt.Errorf("%w: %v", ErrAnchorDamaged, firstErr)
	}
	return best, nil
}

// anchorFile is the open anchor the syncer writes. Only the goroutine that
// holds Ledger.syncing (or Open/Close) touches it.
type anchorFile struct {
	f    *os.File
	slot int64
}

// openAnchorFile opens (creating and preallocating) the anchor at path and
// returns it with the head it held.
func openAnchorFile(path string) (*anchorFile, Anchor, error) {
	var head Anchor
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, head, fmt.Errorf("open audit anchor: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, head, fmt.Errorf("stat audit anchor: %w", err)
	}
	if fi.Size() > 0 {
		b := make([]byte, min(fi.Size(), 2*anchorSlot))
		if _, err := f.ReadAt(b, 0); err != nil {
			f.Close()
			return nil, head, fmt.Errorf("read audit anchor: %w", err)
		}
		if head, err = parseAnchor(b); err != nil {
			// Keep the file open: the caller reports the damage and the
			// next write repairs it.
			return &anchorFile{f: f}, head, err
		}
	}
	if fi.Size() < 2*anchorSlot {
		if _, err := f.WriteAt(make([]byte, 2*anchorSlot-fi.Size()), fi.Size()); err != nil {
			f.Close()
			return nil, head, fmt.Errorf("preallocate audit anchor: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, head, fmt.Errorf("sync audit anchor: %w", err)
		}
		if err := syncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, head, err
		}
	}
	return &anchorFile{f: f}, head, nil
}

// write stores a in the slot after the last one written: a torn write
// leaves the previous head intact in the other slot.
func (af *anchorFile) write(a Anchor) error {
	if _, err := af.f.WriteAt(a.encode(), af.slot*anchorSlot); err != nil {
		return fmt.Errorf("write audit anchor: %w", err)
	}
	af.slot ^= 1
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open state dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync state dir: %w", err)
	}
	return nil
}

// ParseHead parses a head given as SEQ:HASH (the hash as recorded,
// "sha256:…").
func ParseHead(s string) (Anchor, error) {
	seqStr, hash, ok := strings.Cut(s, ":")
	seq, err := strconv.ParseUint(seqStr, 10, 64)
	if !ok || err != nil || seq == 0 || !strings.HasPrefix(hash, "sha256:") || len(hash) != len(Genesis) {
		return Anchor{}, fmt.Errorf("head %q: want SEQ:sha256:HEX (as in the journal's 'audit head' lines)", s)
	}
	return Anchor{Seq: seq, Hash: hash}, nil
}
