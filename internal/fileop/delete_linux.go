package fileop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/securefs"
)

// DeleteResult describes what was removed.
type DeleteResult struct {
	// Kind is securefs.KindFile or securefs.KindSymlink.
	Kind api.Kind
	// SHA256 is "sha256:<hex>" of the file's content or, for a symlink,
	// of its target string (the link is removed, its target never read);
	// empty for a file above MaxHashBytes, which is recorded by Size.
	SHA256 string
	// Size is the content's length, or the target string's.
	Size int64
}

// Delete removes p's final name if it is a regular file or a symlink: a
// symlink itself is removed, never followed; a directory is a *KindError
// that is ErrIsDir; a FIFO, socket or device a *KindError (ErrNotRegular);
// a missing name securefs.ErrNotExist (precondition_failed). check, if set, runs on the name as
// it is right before unlinkat(parent, name, 0), and an error from it
// leaves the name in place. The directory is fsynced afterwards.
//
// Between the check and the unlink another process may replace the name:
// Linux has no "unlink if still this inode". The daemon's own writers
// cannot, holding Locks; unlinkat with flags 0 never removes a directory.
//
// An error from the directory fsync after the unlink wraps ErrNotDurable
// and comes with the filled result: the name is gone.
func Delete(p *Parent, check func(Current) error) (DeleteResult, error) {
	return DeleteContext(context.Background(), p, check)
}

// DeleteContext is Delete hashing what it removes under ctx (it stops
// with ctx's error, nothing removed, when ctx ends). A file above
// MaxHashBytes is removed without a digest: its record has the size.
func DeleteContext(ctx context.Context, p *Parent, check func(Current) error) (DeleteResult, error) {
	defer runtime.KeepAlive(p)
	if err := checkTarget(p.Name); err != nil {
		return DeleteResult{}, fmt.Errorf("delete: %w", err)
	}
	cur, err := p.Stat()
	if err != nil {
		return DeleteResult{}, fmt.Errorf("delete: %w", err)
	}
	var res DeleteResult
	switch cur.Kind {
	case KindAbsent:
		return DeleteResult{}, gone("delete %q: %w", p.Name, securefs.ErrNotExist)
	case securefs.KindFile:
		res = DeleteResult{Kind: cur.Kind, Size: cur.Size}
		if cur.Size <= MaxHashBytes {
			sum, err := cur.SHA256Context(ctx)
			switch {
			case errors.Is(err, ErrTooLarge): // it grew past the cap: size only
			case err != nil:
				return DeleteResult{}, fmt.Errorf("delete: %w", err)
			default:
				res.SHA256, res.Size = sum, cur.sum.n
			}
		}
	case securefs.KindSymlink:
		target, err := readlinkAt(p.fd(), p.Name)
		if err != nil {
			return DeleteResult{}, fmt.Errorf("delete %q: %w", p.Name, err)
		}
		sum := sha256.Sum256([]byte(target))
		res = DeleteResult{Kind: cur.Kind, SHA256: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(target))}
	default:
		return DeleteResult{}, fmt.Errorf("delete: %w", &KindError{Name: p.Name, Kind: cur.Kind})
	}
	if check != nil {
		if err := check(cur); err != nil {
			return DeleteResult{}, fmt.Errorf("delete %q: %w", p.Name, err)
		}
	}
	switch err := unix.Unlinkat(p.fd(), p.Name, 0); err {
	case nil:
	case unix.ENOENT:
		return DeleteResult{}, gone("delete %q: %w (%v)", p.Name, securefs.ErrNotExist, err)
	case unix.EISDIR:
		return DeleteResult{}, fmt.Errorf("delete: %w", &KindError{Name: p.Name, Kind: securefs.KindDir})
	default:
		return DeleteResult{}, fmt.Errorf("delete %q: %w", p.Name, err)
	}
	if err := p.syncDir(); err != nil {
		return res, fmt.Errorf("delete %q: %w: %w", p.Name, ErrNotDurable, err)
	}
	return res, nil
}

// readlinkAt reads the target of the symlink name in dirfd; EINVAL means
// it is no longer a symlink.
func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	switch {
	case err == unix.EINVAL || err == unix.ENOENT:
		return "", fmt.Errorf("readlink: %w (%v)", ErrChanged, err)
	case err != nil:
		return "", fmt.Errorf("readlink: %w", err)
	case n == len(buf):
		return "", fmt.Errorf("readlink: %w", unix.ENAMETOOLONG)
	}
	return string(buf[:n]), nil
}

// RemoveTemp unlinks name in p's directory if it is one of this package's
// temporary names (TempPrefix) and a regular file: the start-up sweep of
// the names a journal saw reported by OnTemp and not by OnTempDone. A
// name that is already gone is securefs.ErrNotExist.
func RemoveTemp(p *Parent, name string) error {
	defer runtime.KeepAlive(p)
	if err := checkName(name); err != nil {
		return fmt.Errorf("remove temp: %w", err)
	}
	if !strings.HasPrefix(name, TempPrefix) {
		return fmt.Errorf("remove temp: %w: %q lacks the prefix %q (%w)", ErrBadName, name, TempPrefix, securefs.ErrInvalidPath)
	}
	var st unix.Stat_t
	switch err := unix.Fstatat(p.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == unix.ENOENT:
		return fmt.Errorf("remove temp %q: %w", name, securefs.ErrNotExist)
	case err != nil:
		return fmt.Errorf("remove temp %q: %w", name, err)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("remove temp: %w", &KindError{Name: name, Kind: kindOf(st.Mode)})
	}
	if err := unix.Unlinkat(p.fd(), name, 0); err != nil {
		if err == unix.ENOENT {
			return fmt.Errorf("remove temp %q: %w", name, securefs.ErrNotExist)
		}
		return fmt.Errorf("remove temp %q: %w", name, err)
	}
	return p.syncDir()
}
