package fileop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/securefs"
)

// ErrTooManyEntries: a walk met more entries than its bound, or
// directories nested deeper than MaxWalkDepth. The caller fails closed:
// names it could not see cannot be checked.
var ErrTooManyEntries = errors.New("too many entries to walk")

// MaxWalkDepth bounds how deep WalkNames descends (each level holds one
// fd while its children are walked).
const MaxWalkDepth = 128

// walkBatch is how many names are read from a directory at a time.
const walkBatch = 1024

// WalkNames calls fn with the path relative to p's final name ("a",
// "a/b", ...) and the kind of every entry beneath that directory, at
// every depth: the names a directory move carries, which the decision
// checks against never globs at their new path (a move may not carry a
// never-listed entry out from under a path glob). The directory must
// still be the inode want describes (src.Stat() as the decision saw it,
// the same Current then given to Move as MoveOptions.Source), else
// ErrChanged; a name that is not a directory has nothing beneath it and
// fn is not called.
//
// Each directory is opened from its parent's fd, one plain name at a
// time, with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS (O_NOFOLLOW
// without openat2): a symlink is reported as one and never descended,
// and one planted in place of a directory mid-walk fails the walk with
// ErrChanged. More than maxEntries entries, or a deeper nesting than
// MaxWalkDepth, is ErrTooManyEntries: fail closed. An error from fn stops
// the walk and is returned. The walk looks at ctx once per directory.
//
// The names are those present during the walk: the caller holds the
// source's lock so the daemon's own calls cannot add one before the move,
// but another process writing in the tree can (the same class as a
// directory renamed by another process, which no lock covers).
func (p *Parent) WalkNames(ctx context.Context, want Current, maxEntries int, fn func(rel string, kind api.Kind) error) error {
	defer runtime.KeepAlive(p)
	if want.Kind != securefs.KindDir {
		if want.Exists() {
			return nil
		}
		return fmt.Errorf("walk %q: %w", p.Name, ErrNoSource)
	}
	fd, err := openDirNoFollow(p.fd(), p.Name)
	if err != nil {
		return fmt.Errorf("walk %q: %w", p.Name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("walk %q: %w", p.Name, err)
	}
	if st.Dev != want.Dev || st.Ino != want.Ino {
		unix.Close(fd)
		return fmt.Errorf("walk %q: %w: not the directory the decision saw", p.Name, ErrChanged)
	}
	w := walker{ctx: ctx, left: maxEntries, fn: fn}
	return w.dir(fd, "", 1)
}

type walker struct {
	ctx  context.Context
	left int
	fn   func(string, api.Kind) error
}

// dir walks the directory open at fd (and closes it); prefix is its path
// relative to the walk's top ("" for the top).
func (w *walker) dir(fd int, prefix string, depth int) error {
	f := os.NewFile(uintptr(fd), prefix)
	defer f.Close()
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if depth > MaxWalkDepth {
		return fmt.Errorf("walk %q: %w: nested deeper than %d", prefix, ErrTooManyEntries, MaxWalkDepth)
	}
	for {
		names, err := f.Readdirnames(walkBatch)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("walk %q: %w", prefix, err)
		}
		for _, name := range names {
			if w.left--; w.left < 0 {
				return fmt.Errorf("walk: %w", ErrTooManyEntries)
			}
			rel := name
			if prefix != "" {
				rel = prefix + "/" + name
			}
			var st unix.Stat_t
			err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
			if err == unix.ENOENT {
				continue // gone since the listing: nothing to carry
			}
			if err != nil {
				return fmt.Errorf("walk %q: %w", rel, err)
			}
			kind := kindOf(st.Mode)
			if err := w.fn(rel, kind); err != nil {
				return err
			}
			if kind != securefs.KindDir {
				continue
			}
			sub, err := openDirNoFollow(fd, name)
			if err == unix.ENOENT {
				continue
			}
			if err != nil {
				return fmt.Errorf("walk %q: %w", rel, err)
			}
			var sst unix.Stat_t
			if err := unix.Fstat(sub, &sst); err != nil || sst.Dev != st.Dev || sst.Ino != st.Ino {
				unix.Close(sub)
				return fmt.Errorf("walk %q: %w", rel, ErrChanged)
			}
			if err := w.dir(sub, rel, depth+1); err != nil {
				return err
			}
		}
	}
}

// noOpenat2Dir latches when the kernel lacks openat2.
var noOpenat2Dir atomic.Bool

// openDirNoFollow opens the directory name, one plain name, in dirfd for
// reading, following no symlink: openat2 RESOLVE_BENEATH|
// RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS, or openat O_NOFOLLOW where
// the kernel lacks openat2 (for one plain name the two refuse the same
// things). A symlink there is ErrChanged (wrapping ELOOP), anything else
// but a directory securefs.ErrNotExist (ENOTDIR); ENOENT is returned
// bare.
func openDirNoFollow(dirfd int, name string) (int, error) {
	if err := checkName(name); err != nil {
		return -1, err
	}
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	var fd int
	var err error = unix.ENOSYS
	if !noOpenat2Dir.Load() {
		how := unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		for range maxOpenRetries {
			fd, err = unix.Openat2(dirfd, name, &how)
			if err != unix.EAGAIN && err != unix.EINTR {
				break
			}
		}
		if err == unix.ENOSYS {
			noOpenat2Dir.Store(true)
		}
	}
	if err == unix.ENOSYS {
		fd, err = unix.Openat(dirfd, name, flags, 0)
	}
	if err == unix.ENOTDIR {
		// O_NOFOLLOW|O_DIRECTORY on a symlink is ENOTDIR, not ELOOP: look
		// at what is there. Not a directory, or a directory now (it
		// changed since the open), both fail.
		var st unix.Stat_t
		if serr := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); serr == nil {
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFLNK:
				err = unix.ELOOP
			case unix.S_IFDIR:
				return -1, fmt.Errorf("%w: %q was not a directory when opened (%w)", ErrChanged, name, err)
			}
		}
	}
	switch err {
	case nil:
		return fd, nil
	case unix.ENOENT:
		return -1, err
	case unix.ELOOP:
		return -1, fmt.Errorf("%w: %q is a symlink now (%w)", ErrChanged, name, err)
	case unix.ENOTDIR:
		return -1, fmt.Errorf("%w (%w)", securefs.ErrNotExist, err)
	}
	return -1, err
}

// maxOpenRetries bounds EAGAIN retries of openat2 (a racing rename).
const maxOpenRetries = 128
