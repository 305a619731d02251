package audit

// The write-ahead ring: the file that makes a batch of records durable
// cheaply, beside the JSONL ledger (docs/audit.md, "The write-ahead ring").
//
// Why. An append to the ledger grows the file, so its fdatasync must
// also commit the new size (and, on ext4, the allocation) through the
// file system's journal (or, on ext4 without one, write the inode): a
// second device round trip, and on a journaled file system a journal
// thread woken, for every sync. A direct write over blocks that were
// written before, inside the file's size, needs only the data written
// and the device's cache flushed (without a journal, also the inode
// block its mtime dirtied). On this project's machine (ext4 without a
// journal, virtio disk) that is 130-145 us per sync back to back instead
// of 195-215, and no slower after an idle spell (docs/performance.md).
//
// So each sync writes its batch of records (the exact ledger lines) as
// one frame into a ring of pre-written blocks (audit.wal) with one
// direct, synchronous write (O_DIRECT|O_DSYNC: the data and the device's
// flush, no page cache; where the file system refuses O_DIRECT, a
// buffered write and an fdatasync). The ledger gets the same lines with
// write(2) and is fdatasynced in the background (a checkpoint) a second
// after a frame at the latest, or at once when a quarter of the ring is
// used. A frame is overwritten only after a checkpoint covered its
// records. After a power cut the ledger's disk copy may end before the
// durable head: Open appends the ring's records that chain on from the
// ledger's last record, and says so in a recovered record. The ledger
// stays plain JSONL; the ring holds nothing the ledger does not (or,
// after a power cut, will not) hold.
//
// Format. Block 0 (4 KiB) is a text header naming the ledger file it
// belongs to (inode and birth time: a ring left beside a replaced ledger
// is reset, never replayed into it). The ring follows. A frame starts at
// a 4 KiB boundary: a 32-byte head (magic 0xff "SW1", payload length,
// first and last seq, CRC-32C over the head's first 24 bytes and the
// payload), then the payload (whole ledger lines), zero-padded to 4 KiB.
// A frame never shares a block with another, so a torn write spoils only
// its own. 0xff never occurs in the UTF-8 of a ledger line, so the magic
// starts only frames; a frame torn by a power cut, or partly overwritten
// by a later one, fails its CRC and is skipped.

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

const (
	walHeaderLen = 4096
	walAlign     = 4096 // a frame's blocks: the unit of a direct write
	walFrameHead = 32
	walMagicText = "sluice-audit-wal 1"
)

var walMagic = [4]byte{0xff, 'S', 'W', '1'}

// walMaxRead bounds what is read of a ring file: twice what a ring of
// this size (or the default) takes. A larger file was not written by this
// sluiced: Open keeps it aside and makes a new ring, and verify does not
// read it.
func walMaxRead(size int64) int64 {
	return 2 * (walHeaderLen + max(size, DefaultWALSize))
}

// ring is a ring file as read: ok when its header is intact and frames
// follow it, mine when the header names the ledger file being opened.
type ring struct {
	ok, mine bool
	frames   []byte // the file after its header
}

// parseRing reads data, a ring file, for the ledger file whose identity
// is id (idErr: unknown, so never mine).
func parseRing(data []byte, id walIdentity, idErr error) ring {
	hid, ok := parseWALHeader(data)
	if !ok || len(data) <= walHeaderLen { // a header alone holds no frames
		return ring{}
	}
	return ring{ok: true, mine: idErr == nil && hid == id, frames: data[walHeaderLen:]}
}

// tail returns the ring's records that a ledger ending at (seq, hash)
// takes on Open (walTail), if it may take any: when the ring is that
// ledger file's (inode and birth time), or when the ledger holds
// records, since then only records that continue its own hash chain are
// taken (a ring copied along with its ledger still counts). An empty
// ledger beside another file's ring is a ledger that was removed or
// replaced: its old ring's first records would chain on from genesis
// just the same, and are not taken.
func (r ring) tail(seq uint64, hash string) []walRecord {
	if !r.ok || !(r.mine || seq > 0) {
		return nil
	}
	return walTail(r.frames, seq, hash)
}

// DefaultWALSize is the ring's size beyond its header: some three
// thousand one-record frames, several seconds of records at full load.
const DefaultWALSize = 2 << 20

// WALPath is where the write-ahead ring of the ledger at path lives:
// STATE_DIR/audit.wal beside STATE_DIR/audit.jsonl.
func WALPath(ledgerPath string) string {
	return strings.TrimSuffix(ledgerPath, filepath.Ext(ledgerPath)) + ".wal"
}

// walIdentity names the ledger file a ring belongs to.
type walIdentity struct {
	Ino       uint64
	BirthSec  int64
	BirthNsec uint32
}

func (id walIdentity) header() []byte {
	body := fmt.Sprintf("%s ino=%d birth=%d.%09d", walMagicText, id.Ino, id.BirthSec, id.BirthNsec)
	b := make([]byte, walHeaderLen)
	copy(b, fmt.Sprintf("%s crc=%08x\n", body, crc32.Checksum([]byte(body), crcTable)))
	return b
}

func parseWALHeader(b []byte) (walIdentity, bool) {
	var id walIdentity
	line, _, ok := bytes.Cut(b[:min(len(b), walHeaderLen)], []byte("\n"))
	if !ok {
		return id, false
	}
	i := bytes.LastIndex(line, []byte(" crc="))
	if i < 0 {
		return id, false
	}
	var crc uint32
	if _, err := fmt.Sscanf(string(line[i:]), " crc=%08x", &crc); err != nil || crc != crc32.Checksum(line[:i], crcTable) {
		return id, false
	}
	n, err := fmt.Sscanf(string(line[:i]), walMagicText+" ino=%d birth=%d.%d", &id.Ino, &id.BirthSec, &id.BirthNsec)
	return id, err == nil && n == 3
}

// walFrameSize is the ring bytes a frame of payload n takes.
func walFrameSize(n int) int {
	return (walFrameHead + n + walAlign - 1) / walAlign * walAlign
}

// frameCRC is a frame's checksum: its head's first 24 bytes (magic,
// length, first and last seq), then its payload.
func frameCRC(head, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum(head[:24], crcTable), crcTable, payload)
}

// appendWALFrame appends the frame holding payload (the lines of records
// first..last) to dst, padded to its size.
func appendWALFrame(dst []byte, first, last uint64, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, walMagic[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.LittleEndian.AppendUint64(dst, first)
	dst = binary.LittleEndian.AppendUint64(dst, last)
	dst = binary.LittleEndian.AppendUint32(dst, frameCRC(dst[start:], payload))
	dst = append(dst, 0, 0, 0, 0)
	dst = append(dst, payload...)
	for len(dst)-start < walFrameSize(len(payload)) {
		dst = append(dst, 0)
	}
	return dst
}

// walRecord is one ledger line found in a ring frame, checked (its own
// hash) and decoded.
type walRecord struct {
	rec  *Record
	line []byte // as in the ledger, with its newline
}

// walRecords returns the records of every intact frame in ring (the file
// after its header) whose records end after seq, each line checked by
// checkLine, sorted by seq. Their place in the chain is walTail's
// business.
func walRecords(ring []byte, after uint64) []walRecord {
	var out []walRecord
	for off := 0; off+walFrameHead <= len(ring); off += walAlign {
		h := ring[off : off+walFrameHead]
		if !bytes.Equal(h[:4], walMagic[:]) {
			continue
		}
		n := int(binary.LittleEndian.Uint32(h[4:8]))
		first, last := binary.LittleEndian.Uint64(h[8:16]), binary.LittleEndian.Uint64(h[16:24])
		if n <= 0 || n > len(ring)-off-walFrameHead || first == 0 || last < first {
			continue
		}
		payload := ring[off+walFrameHead : off+walFrameHead+n]
		if frameCRC(h, payload) != binary.LittleEndian.Uint32(h[24:28]) || payload[n-1] != '\n' {
			continue
		}
		off += walFrameSize(n) - walAlign
		if last <= after {
			continue
		}
		for len(payload) > 0 {
			i := bytes.IndexByte(payload, '\n')
			line := payload[:i+1]
			payload = payload[i+1:]
			if len(line) > maxRecordBytes+1 {
				continue // sluiced never writes one: Read would refuse it
			}
			if rec, err := checkLine(line); err == nil && rec.Seq > after && rec.Seq <= maxSeq {
				out = append(out, walRecord{rec: rec, line: line})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b walRecord) int { return cmp.Compare(a.rec.Seq, b.rec.Seq) })
	return out
}

// walTail returns the records of ring that continue the chain ending at
// (seq, hash), in order: each has prev naming the one before's hash and
// the next seq (a truncated record may skip ahead, as in the ledger).
// Stale frames (an earlier lap, another chain) do not chain on and are
// passed over.
func walTail(ring []byte, seq uint64, hash string) []walRecord {
	var out []walRecord
	for _, wr := range walRecords(ring, seq) {
		r := wr.rec
		if r.Seq <= seq || r.Prev != hash || (r.Seq != seq+1 && r.Kind != KindTruncated) {
			continue
		}
		out = append(out, wr)
		seq, hash = r.Seq, r.Hash
	}
	return out
}

// readWAL reads the ring file whole. A file that is not a regular file,
// is larger than any ring of this size could be, or cannot be read gives
// an error: the caller keeps it aside rather than overwrite it.
func readWAL(w *os.File, size int64) ([]byte, error) {
	fi, err := w.Stat()
	switch {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("not a regular file: %s", fi.Mode())
	case fi.Size() > walMaxRead(size):
		return nil, fmt.Errorf("%d bytes, more than a ring of %d bytes can hold", fi.Size(), size)
	}
	data := make([]byte, fi.Size())
	if _, err := io.ReadFull(io.NewSectionReader(w, 0, fi.Size()), data); err != nil {
		return nil, err
	}
	return data, nil
}

// RingTail reads the write-ahead ring beside the ledger at ledgerPath
// and returns the records that continue the chain ending at (seq, hash):
// what the next Open of that ledger appends from it, by the same rules.
// 'sluice audit verify' uses it to tell a ledger cut from one whose disk
// copy is behind after a power cut. A missing ring gives an error that
// matches os.ErrNotExist.
func RingTail(ledgerPath string, seq uint64, hash string) ([]*Record, error) {
	path := WALPath(ledgerPath)
	f, err := openRegular(path)
	if err != nil {
		return nil, fmt.Errorf("read write-ahead ring: %w", err)
	}
	defer f.Close()
	b, err := readWAL(f, DefaultWALSize)
	if err != nil {
		return nil, fmt.Errorf("read write-ahead ring %s: %w", path, err)
	}
	id, idErr := walIdentity{}, error(os.ErrNotExist)
	if lf, err := os.Open(ledgerPath); err == nil {
		id, idErr = ledgerIdentity(lf)
		lf.Close()
	}
	r := parseRing(b, id, idErr)
	if !r.ok {
		return nil, fmt.Errorf("read write-ahead ring %s: not a ring", path)
	}
	var out []*Record
	for _, wr := range r.tail(seq, hash) {
		out = append(out, wr.rec)
	}
	return out, nil
}
