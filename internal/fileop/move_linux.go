package fileop

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/securefs"
)

var (
	// ErrNoReplaceUnsupported: renameat2 with RENAME_NOREPLACE is not
	// available, and a move never falls back to a rename that could
	// replace the destination (a check-then-rename would let a name
	// created in between be destroyed). Linux before 3.15 has no
	// renameat2 (ENOSYS); a filesystem whose rename does not implement the
	// flag answers EINVAL (ext4 has it since 3.15, the others later; some
	// network and FUSE filesystems not at all). The error wraps the errno.
	ErrNoReplaceUnsupported = errors.New("rename without replacing (RENAME_NOREPLACE) not supported here")
	// ErrCrossDevice: the source and the destination are on different
	// file systems (EXDEV). A move is one rename; it never copies.
	ErrCrossDevice = errors.New("move across file systems")
	// ErrIntoItself: a directory cannot move beneath itself.
	ErrIntoItself = errors.New("directory would move beneath itself")
	// ErrNoSource: MoveOptions.Source was not set: a move binds to the
	// source the decision saw, and without it there is nothing to bind.
	ErrNoSource = errors.New("move without the decided source's identity")
)

// MoveOptions are the decided parameters of one move.
type MoveOptions struct {
	// Source is the source as the decision saw it (src.Stat() before
	// deciding, and before WalkNames for a directory). Required: Move
	// refuses with ErrChanged when the name now names another inode, so
	// what moves is what was checked.
	Source Current
	// IfMatch is the caller's precondition on the source, as for Write
	// and Delete ("" none; "sha256:<hex>": a regular file with that
	// content; "absent" never holds for a source).
	IfMatch string
}

// MoveResult describes what was moved.
type MoveResult struct {
	// Kind is securefs.KindFile, KindDir or KindSymlink.
	Kind api.Kind
	// SHA256 is "sha256:<hex>" of a regular file's content; empty for a
	// directory, a symlink, or a file above MaxHashBytes.
	SHA256 string
	Size   int64
}

// Move renames src's final name to dst's, between the two held parent
// fds, with renameat2(RENAME_NOREPLACE): an existing destination (of any
// kind, a symlink or a name created a moment ago included) is never
// replaced, and neither name is followed: a symlink moves as itself. The
// caller holds both names' locks (Locks.LockPair) from before it stats
// the source for its decision until Move returns.
//
// Before the rename, with the locks held, the source must still be the
// inode opts.Source describes (else ErrChanged), a regular file,
// directory or symlink (else a *KindError), and satisfy opts.IfMatch
// (else ErrPrecondition); the destination must be absent (ErrExists), and
// a directory may not move beneath itself (ErrIntoItself). Linux has no
// "rename if still this inode": another process could swap the source
// name between that check and the rename, so afterwards the destination
// is checked to be the same inode, and if it is not, what was moved is
// moved back (NOREPLACE again) and the move is ErrChanged: a directory
// the decision never walked does not stay under the new name.
//
// Both directories are fsynced after the rename; a failure there wraps
// ErrNotDurable and comes with the filled result: the move happened.
// Without RENAME_NOREPLACE the move fails (ErrNoReplaceUnsupported); a
// move across file systems is ErrCrossDevice.
func Move(src, dst *Parent, opts MoveOptions) (MoveResult, error) {
	return MoveContext(context.Background(), src, dst, opts)
}

// MoveContext is Move hashing a regular file (for if_match and the
// record) under ctx.
func MoveContext(ctx context.Context, src, dst *Parent, opts MoveOptions) (MoveResult, error) {
	defer runtime.KeepAlive(src)
	defer runtime.KeepAlive(dst)
	for _, n := range []string{src.Name, dst.Name} {
		if err := checkTarget(n); err != nil {
			return MoveResult{}, fmt.Errorf("move: %w", err)
		}
	}
	if !opts.Source.Exists() {
		return MoveResult{}, fmt.Errorf("move %q: %w", src.Name, ErrNoSource)
	}
	if err := ValidateIfMatch(opts.IfMatch); err != nil {
		return MoveResult{}, fmt.Errorf("move %q: %w", src.Name, err)
	}
	cur, err := src.Stat()
	if err != nil {
		return MoveResult{}, fmt.Errorf("move: %w", err)
	}
	if !cur.Exists() {
		return MoveResult{}, fmt.Errorf("move %q: %w", src.Name, securefs.ErrNotExist)
	}
	if cur.Dev != opts.Source.Dev || cur.Ino != opts.Source.Ino || cur.Kind != opts.Source.Kind {
		return MoveResult{}, fmt.Errorf("move %q: %w: not the %s the decision saw", src.Name, ErrChanged, opts.Source.Kind)
	}
	switch cur.Kind {
	case securefs.KindFile, securefs.KindDir, securefs.KindSymlink:
	default:
		return MoveResult{}, fmt.Errorf("move: %w", &KindError{Name: src.Name, Kind: cur.Kind})
	}
	if err := MatchIfMatchContext(ctx, opts.IfMatch, cur); err != nil {
		return MoveResult{}, fmt.Errorf("move %q: %w", src.Name, err)
	}
	res := MoveResult{Kind: cur.Kind, Size: cur.Size}
	if cur.Kind == securefs.KindFile && cur.Size <= MaxHashBytes {
		sum, err := cur.SHA256Context(ctx) // cached when if_match hashed it
		switch {
		case errors.Is(err, ErrTooLarge):
		case err != nil:
			return MoveResult{}, fmt.Errorf("move: %w", err)
		default:
			res.SHA256, res.Size = sum, cur.sum.n
		}
	}
	dcur, err := dst.Stat()
	if err != nil {
		return MoveResult{}, fmt.Errorf("move: %w", err)
	}
	if dcur.Exists() {
		return MoveResult{}, fmt.Errorf("move to %q: %w (a %s)", dst.Name, ErrExists, dcur.Kind)
	}
	if cur.Kind == securefs.KindDir {
		if err := notBeneath(src, dst); err != nil {
			return MoveResult{}, err
		}
	}

	if testHookBeforeRename != nil {
		testHookBeforeRename()
	}
	switch err := unix.Renameat2(src.fd(), src.Name, dst.fd(), dst.Name, unix.RENAME_NOREPLACE); err {
	case nil:
	case unix.EEXIST, unix.ENOTEMPTY:
		return MoveResult{}, fmt.Errorf("move to %q: %w (%w)", dst.Name, ErrExists, err)
	case unix.ENOENT:
		return MoveResult{}, fmt.Errorf("move %q: %w (%w)", src.Name, securefs.ErrNotExist, err)
	case unix.EXDEV:
		return MoveResult{}, fmt.Errorf("move %q: %w (%w)", src.Name, ErrCrossDevice, err)
	case unix.ENOSYS:
		return MoveResult{}, fmt.Errorf("move %q: %w: the kernel has no renameat2 (%w)", src.Name, ErrNoReplaceUnsupported, err)
	case unix.EINVAL:
		// The flag unknown to this filesystem, or (a race past
		// notBeneath) a directory into itself: either way, refused.
		return MoveResult{}, fmt.Errorf("move %q: %w, or a directory would move beneath itself (%w)", src.Name, ErrNoReplaceUnsupported, err)
	default:
		return MoveResult{}, fmt.Errorf("move %q: rename: %w", src.Name, err)
	}

	var st unix.Stat_t
	if err := unix.Fstatat(dst.fd(), dst.Name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Dev != cur.Dev || st.Ino != cur.Ino {
		// Another process swapped the source name between the check and
		// the rename: put back what we moved.
		back := unix.Renameat2(dst.fd(), dst.Name, src.fd(), src.Name, unix.RENAME_NOREPLACE)
		syncErr := errors.Join(src.syncDir(), dst.syncDir())
		if back != nil {
			return MoveResult{}, fmt.Errorf("move %q: %w: another inode was moved in the race and could not be moved back: %w", src.Name, ErrChanged, back)
		}
		if syncErr != nil {
			return MoveResult{}, fmt.Errorf("move %q: %w: another inode was moved in the race and moved back (not durably: %w)", src.Name, ErrChanged, syncErr)
		}
		return MoveResult{}, fmt.Errorf("move %q: %w: another inode was moved in the race, and moved back", src.Name, ErrChanged)
	}

	err = src.syncDir()
	if !sameDir(src, dst) {
		err = errors.Join(err, dst.syncDir())
	}
	if err != nil {
		return res, fmt.Errorf("move %q to %q: %w: %w", src.Name, dst.Name, ErrNotDurable, err)
	}
	return res, nil
}

// testHookBeforeRename, set by tests only, runs between Move's checks and
// its rename: where another process's change lands in a race.
var testHookBeforeRename func()

// notBeneath refuses to move src (a directory) to dst when dst's parent
// is src itself or beneath it, by the kernel's names for the parent fds;
// the kernel refuses it too (EINVAL), this says why.
func notBeneath(src, dst *Parent) error {
	sabs, _, err := src.Locate()
	if err != nil {
		return fmt.Errorf("move %q: %w", src.Name, err)
	}
	dabs, _, err := dst.Locate()
	if err != nil {
		return fmt.Errorf("move to %q: %w", dst.Name, err)
	}
	if strings.HasPrefix(dabs, sabs+"/") {
		return fmt.Errorf("move %q: %w", src.Name, ErrIntoItself)
	}
	return nil
}

// sameDir reports whether two parents hold the same directory inode.
func sameDir(a, b *Parent) bool {
	return a.dir.Stat.Dev == b.dir.Stat.Dev && a.dir.Stat.Ino == b.dir.Stat.Ino
}

// LockPair locks the names of a and b (a move's source and destination)
// in one global order, the order of their keys (directory device, inode,
// name), so two moves that take the same two names in opposite roles
// cannot deadlock; one name reached twice is locked once. It returns the
// function that releases both (idempotent). Lock holders hold one name
// and never wait for a second, so they cannot close a cycle either.
func (l *Locks) LockPair(a, b *Parent) (unlock func()) {
	ka, kb := keyOf(a), keyOf(b)
	if ka == kb {
		return l.Lock(a)
	}
	first, second := a, b
	if keyLess(kb, ka) {
		first, second = b, a
	}
	u1 := l.Lock(first)
	u2 := l.Lock(second)
	var once sync.Once
	return func() {
		once.Do(func() {
			u2()
			u1()
		})
	}
}

func keyOf(p *Parent) lockKey {
	return lockKey{dev: p.dir.Stat.Dev, ino: p.dir.Stat.Ino, name: p.Name}
}

func keyLess(a, b lockKey) bool {
	if a.dev != b.dev {
		return a.dev < b.dev
	}
	if a.ino != b.ino {
		return a.ino < b.ino
	}
	return a.name < b.name
}
