package fileop

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/securefs"
)

// ExistsError: a directory was to be made where a name exists. It is
// ErrExists.
type ExistsError struct {
	Name string
	Kind api.Kind
}

func (e *ExistsError) Error() string { return fmt.Sprintf("%q exists (a %s)", e.Name, e.Kind) }

// Is makes an ExistsError ErrExists.
func (e *ExistsError) Is(target error) bool { return target == ErrExists }

// Reason is ErrExists's: a name is in the way (precondition_failed).
func (e *ExistsError) Reason() api.Reason { return api.ReasonPreconditionFailed }

// MkdirOptions are the decided parameters of one mkdir.
type MkdirOptions struct {
	// Perm is the permission bits of each directory made (0 means 0755),
	// set with fchmod after mkdirat so the daemon's umask does not
	// matter. Only the 0777 bits are used.
	Perm fs.FileMode
	// UID and GID own each directory made (the daemon passes the root
	// directory's owner); -1 leaves that id as the daemon made it.
	UID, GID int
}

// MkdirResult lists the directories made, outermost first: p.Name for
// Mkdir, paths relative to the root for MkdirAll (empty when all
// existed).
type MkdirResult struct {
	Created []string
}

// testHookAfterMkdirat, set by tests only, runs right after a directory
// is made and before it is opened: where another process's swap lands.
var testHookAfterMkdirat func(dirfd int, name string)

// Mkdir makes p's final name a directory (mkdirat in the held parent fd).
// An existing name, a directory or anything else, is an *ExistsError
// (ErrExists). The new directory is opened without following anything,
// chowned and chmoded to opts (umask-independent); if another process
// replaced it with a symlink in between, that is ErrChanged and nothing is
// changed through the link. The new directory and its parent are fsynced;
// a failure there wraps ErrNotDurable and comes with the result.
func Mkdir(p *Parent, opts MkdirOptions) (MkdirResult, error) {
	defer runtime.KeepAlive(p)
	if err := checkTarget(p.Name); err != nil {
		return MkdirResult{}, fmt.Errorf("mkdir: %w", err)
	}
	made, err := mkdirOne(p.fd(), p.Name, p.Name, opts)
	if err != nil {
		return MkdirResult{}, fmt.Errorf("mkdir: %w", err)
	}
	unix.Close(made.fd)
	res := MkdirResult{Created: []string{p.Name}}
	if err := errors.Join(made.syncErr, p.syncDir()); err != nil {
		return res, fmt.Errorf("mkdir %q: %w: %w", p.Name, ErrNotDurable, err)
	}
	return res, nil
}

// MkdirAll makes unsafePath and each missing directory before it beneath
// root, one component at a time from the root's fd: each existing
// component is opened with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS
// (O_NOFOLLOW where the kernel lacks openat2), each missing one made with
// mkdirat in its parent's fd and then opened the same way. No symlink is
// followed, neither one that was there (securefs.ErrPathEscapes: the
// directory made must be at the path that was checked) nor one planted
// between two steps (ErrChanged). The components must be plain names ("."
// is skipped; "..", and the temporary prefix, are ErrBadName). Existing
// directories are fine, the last one included; a non-directory in the way
// is an *ExistsError. Each directory made gets opts' owner and mode and is
// fsynced with its parent; a failure there wraps ErrNotDurable and comes
// with the result. What was made before an error stays (and is listed).
func MkdirAll(root *securefs.Root, unsafePath string, opts MkdirOptions) (MkdirResult, error) {
	defer runtime.KeepAlive(root)
	var names []string
	for _, n := range strings.Split(unsafePath, "/") {
		if n == "" || n == "." {
			continue
		}
		if err := checkTarget(n); err != nil {
			return MkdirResult{}, fmt.Errorf("mkdir %q: %w", unsafePath, err)
		}
		names = append(names, n)
	}
	if strings.HasPrefix(unsafePath, "/") {
		return MkdirResult{}, fmt.Errorf("mkdir %q: %w (absolute)", unsafePath, securefs.ErrPathEscapes)
	}
	var res MkdirResult
	var syncErr error
	cur := int(root.Fd()) // O_PATH: fine for *at calls; not ours to close
	curOwned := false
	defer func() {
		if curOwned {
			unix.Close(cur)
		}
	}()
	for i, name := range names {
		rel := strings.Join(names[:i+1], "/")
		fd, err := openDirNoFollow(cur, name)
		switch {
		case err == unix.ENOENT:
			made, merr := mkdirOne(cur, name, rel, opts)
			if errors.Is(merr, ErrExists) {
				// Made by someone else in between: use it if it is a
				// directory, as if it had been there.
				fd, err = openDirNoFollow(cur, name)
				break
			}
			if merr != nil {
				return res, fmt.Errorf("mkdir %q: %w", unsafePath, merr)
			}
			res.Created = append(res.Created, rel)
			fd, err = made.fd, nil
			syncErr = errors.Join(syncErr, made.syncErr, syncFd(cur, curOwned))
		case errors.Is(err, ErrChanged): // a symlink there (ELOOP), or one just now
			return res, fmt.Errorf("mkdir %q: %q is a symlink: %w (%w)", unsafePath, rel, securefs.ErrPathEscapes, err)
		}
		if err != nil {
			return res, fmt.Errorf("mkdir %q: %q: %w", unsafePath, rel, existsErr(cur, name, rel, err))
		}
		if curOwned {
			unix.Close(cur)
		}
		cur, curOwned = fd, true
	}
	if syncErr != nil {
		return res, fmt.Errorf("mkdir %q: %w: %w", unsafePath, ErrNotDurable, syncErr)
	}
	return res, nil
}

// existsErr turns ENOTDIR from opening a component into an *ExistsError
// naming what is there.
func existsErr(dirfd int, name, rel string, err error) error {
	if !errors.Is(err, unix.ENOTDIR) {
		return err
	}
	var st unix.Stat_t
	if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return err
	}
	return &ExistsError{Name: rel, Kind: kindOf(st.Mode)}
}

type madeDir struct {
	fd      int   // the new directory, O_RDONLY|O_DIRECTORY
	syncErr error // its own fsync's
}

// mkdirOne makes name in dirfd, opens it without following anything and
// gives it opts' owner and mode, then fsyncs it (not its parent: the
// caller does). An existing name is an *ExistsError.
func mkdirOne(dirfd int, name, rel string, opts MkdirOptions) (madeDir, error) {
	switch err := unix.Mkdirat(dirfd, name, 0o700); err {
	case nil:
	case unix.EEXIST:
		var st unix.Stat_t
		kind := securefs.KindOther
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			kind = kindOf(st.Mode)
		}
		return madeDir{}, &ExistsError{Name: rel, Kind: kind}
	default:
		return madeDir{}, fmt.Errorf("mkdirat %q: %w", rel, err)
	}
	if testHookAfterMkdirat != nil {
		testHookAfterMkdirat(dirfd, name)
	}
	fd, err := openDirNoFollow(dirfd, name)
	if err != nil {
		if err == unix.ENOENT || errors.Is(err, securefs.ErrNotExist) {
			err = fmt.Errorf("%w: %q replaced after it was made (%w)", ErrChanged, rel, err)
		}
		return madeDir{}, fmt.Errorf("open %q: %w", rel, err)
	}
	if err := setDirMeta(fd, opts); err != nil {
		unix.Close(fd)
		return madeDir{}, fmt.Errorf("%q: %w", rel, err)
	}
	return madeDir{fd: fd, syncErr: syncFd(fd, true)}, nil
}

// setDirMeta chowns then chmods (chown can clear mode bits) the directory
// open at fd.
func setDirMeta(fd int, opts MkdirOptions) error {
	if opts.UID >= 0 || opts.GID >= 0 {
		if err := unix.Fchown(fd, opts.UID, opts.GID); err != nil {
			return fmt.Errorf("fchown: %w", err)
		}
	}
	perm := uint32(opts.Perm & 0o777)
	if opts.Perm == 0 {
		perm = 0o755
	}
	if err := unix.Fchmod(fd, perm); err != nil {
		return fmt.Errorf("fchmod: %w", err)
	}
	return nil
}

// syncFd fsyncs the directory at fd; readable says fd can be fsynced as
// it is (else it is O_PATH and is re-opened through /proc/self/fd).
func syncFd(fd int, readable bool) error {
	if !readable {
		rfd, err := unix.Open(procFd(fd), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("fsync dir: %w", err)
		}
		defer unix.Close(rfd)
		fd = rfd
	}
	fsync := unix.Fsync
	if TestHookSyncDir != nil {
		fsync = TestHookSyncDir
	}
	if err := fsync(fd); err != nil {
		return fmt.Errorf("fsync dir: %w", err)
	}
	return nil
}
