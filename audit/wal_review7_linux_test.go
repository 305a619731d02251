package audit

// Second review of the write-ahead ring (hz/review7): each test fails on
// main as of 8efaba6 and says what it shows.

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestReview7ShortRingNoPanic: openWAL slices data[walHeaderLen:] as soon
// as the header line parses, without checking that the file is longer
// than the header block (RingTail checks; openWAL does not). A ring
// shorter than 4 KiB whose first line is a valid header (a state dir
// copied onto a full disk, a ring cut by hand, an initWAL cut short)
// makes every start of sluiced panic: a crash loop, no calls served.
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
