package fileop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/errclass"
	"github.com/sluicehq/sluice/internal/foldname"
	"github.com/sluicehq/sluice/internal/securefs"
)

// Sentinel errors, checked with errors.Is. Each carries the reason it
// becomes (errclass finds it). Write and Delete are commits of a call
// already decided on the file as it was: a name that is no longer what the
// decision saw (changed, taken, gone, another kind) is precondition_failed.
// A missing name or parent is securefs.ErrNotExist and an escape
// securefs.ErrPathEscapes, as for reads; a commit that finds its name gone
// also carries precondition_failed.
var (
	// ErrBadName: the final component is not one plain name. Errors that
	// wrap it also wrap securefs.ErrInvalidPath.
	ErrBadName = errclass.New(api.ReasonInvalidPath, "not a plain file name")
	// ErrExists: a create found the name taken.
	ErrExists = errclass.New(api.ReasonPreconditionFailed, "file exists")
	// ErrNotRegular: the name is not a regular file (a symlink, directory,
	// FIFO, socket or device). Returned as a *KindError.
	ErrNotRegular = errclass.New(api.ReasonPreconditionFailed, "not a regular file")
	// ErrIsDir: the name is a directory. Returned as a *KindError, which
	// is ErrNotRegular too.
	ErrIsDir = errclass.New(api.ReasonPreconditionFailed, "is a directory")
	// ErrPrecondition: the caller's precondition (if_match) does not hold
	// for the file as it is at commit time.
	ErrPrecondition = errclass.New(api.ReasonPreconditionFailed, "precondition failed")
	// ErrInvalidIfMatch: an if_match value that is none of "", "absent"
	// and "sha256:<64 hex digits>".
	ErrInvalidIfMatch = errclass.New(api.ReasonInvalidArgs, "invalid if_match")
	// ErrChanged: the name kept naming a different file while it was being
	// read or committed (a concurrent writer outside the daemon).
	ErrChanged = errclass.New(api.ReasonPreconditionFailed, "file changed during the operation")
	// ErrNotDurable: the change was committed (the name holds the new
	// file, or is gone) but the directory fsync that makes it survive a
	// crash failed. It comes with a filled result and wraps the fsync's
	// errno: the caller reports what happened, not a failure.
	ErrNotDurable = errclass.New(api.ReasonNotDurable, "committed, but not durable")
	// ErrTooLarge: a file is above MaxHashBytes, the cap on what is hashed
	// for if_match or for a delete's record. It has no reason of its own:
	// an if_match over such a file is ErrPrecondition, and a delete of one
	// records its size.
	ErrTooLarge = errors.New("file too large to hash")
)

// gone is the error of a commit that finds its name missing: the decision
// saw the file, so this is precondition_failed, not not_found. It still
// matches securefs.ErrNotExist.
func gone(format string, args ...any) error {
	return errclass.Wrap(api.ReasonPreconditionFailed, fmt.Errorf(format, args...))
}

// MaxHashBytes caps what one if_match check or one delete reads to hash a
// file (64 MiB). Without it a huge or sparse file (a 1 TiB hole costs no
// disk) would pin a core and the name's lock for as long as it takes to
// hash: an if_match over a larger file fails as precondition_failed, a
// delete of one records its size but no digest.
const MaxHashBytes = 64 << 20

// hashChunk is how much is hashed between two looks at the context.
const hashChunk = 1 << 20

// KindError says what non-regular file a name turned out to be.
type KindError struct {
	Name string
	Kind api.Kind
}

func (e *KindError) Error() string {
	return fmt.Sprintf("%q is a %s, not a regular file", e.Name, e.Kind)
}

// Is makes a KindError ErrNotRegular, and ErrIsDir for a directory.
func (e *KindError) Is(target error) bool {
	return target == ErrNotRegular || (target == ErrIsDir && e.Kind == securefs.KindDir)
}

// Reason is ErrNotRegular's: a commit found another kind of file than the
// decision did.
func (e *KindError) Reason() api.Reason { return api.ReasonPreconditionFailed }

// TempPrefix starts every temporary name this package creates. Write and
// Delete refuse names that start with it, so no tool call can reach a
// temporary file of another call in flight.
const TempPrefix = ".sluice-tmp-"

// maxName is NAME_MAX on every Linux filesystem we run on.
const maxName = 255

// Parent is the directory a path's final name lives in, held open by fd,
// and that name.
type Parent struct {
	// Name is the final component: one plain name, never followed.
	Name string
	root *securefs.Root
	dir  *securefs.Handle // a directory; O_PATH with openat2
}

// ResolveParent resolves the parent directory of unsafePath beneath root
// (symlinks followed only while they stay beneath it, as for reads) and
// returns it with the final name. The name must be plain: not empty, "."
// or "..", without "/" or NUL, at most 255 bytes (ErrBadName). A missing
// parent, or one that is not a directory, is securefs.ErrNotExist; a
// parent outside the root is securefs.ErrPathEscapes. The final name may
// or may not exist: Stat says.
func ResolveParent(root *securefs.Root, unsafePath string) (*Parent, error) {
	dir, name := ".", unsafePath
	if i := strings.LastIndexByte(unsafePath, '/'); i >= 0 {
		dir, name = unsafePath[:i], unsafePath[i+1:]
		if dir == "" {
			dir = "/" // an absolute path: openat2 refuses it as an escape
		}
	}
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("resolve parent of %q: %w", unsafePath, err)
	}
	h, err := root.Resolve(dir)
	if err != nil {
		return nil, err
	}
	if h.Kind != securefs.KindDir {
		h.Close()
		return nil, fmt.Errorf("resolve parent of %q: %w (%v)", unsafePath, securefs.ErrNotExist, unix.ENOTDIR)
	}
	return &Parent{Name: name, root: root, dir: h}, nil
}

func checkName(name string) error {
	why := ""
	switch {
	case name == "":
		why = "empty"
	case name == "." || name == "..":
		why = "a dot name"
	case len(name) > maxName:
		why = "longer than 255 bytes"
	case strings.IndexByte(name, 0) >= 0:
		why = "contains NUL"
	case strings.IndexByte(name, '/') >= 0:
		why = "contains /"
	default:
		return nil
	}
	return fmt.Errorf("%w: %q is %s (%w)", ErrBadName, name, why, securefs.ErrInvalidPath)
}

// checkTarget refuses names a tool may not write or delete.
func checkTarget(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if foldname.HasPrefix(name, TempPrefix) { // ".SLUICE-TMP-x" opens the temp on a case-insensitive disk
		return fmt.Errorf("%w: %q uses the prefix reserved for temporary files (%w)", ErrBadName, name, securefs.ErrInvalidPath)
	}
	return nil
}

// Close releases the parent's fd.
func (p *Parent) Close() error { return p.dir.Close() }

// fd is the parent's fd: -1 once closed, never a number reused by another
// file. Callers keep p alive (runtime.KeepAlive) while they use it.
func (p *Parent) fd() int { return int(p.dir.File().Fd()) }

// Locate returns the absolute path of the final name and that path
// relative to the root, from the kernel's name for the parent's fd: the
// resource for the record, and what never globs are matched against.
func (p *Parent) Locate() (abs, rel string, err error) {
	dabs, drel, err := p.root.Locate(p.dir)
	if err != nil {
		return "", "", err
	}
	abs = strings.TrimSuffix(dabs, "/") + "/" + p.Name
	rel = p.Name
	if drel != "." {
		rel = drel + "/" + p.Name
	}
	return abs, rel, nil
}

// KindAbsent is Current.Kind when the name does not exist.
const KindAbsent = api.KindAbsent

// Current is what the final name is now, from fstatat without following
// it: KindAbsent or a securefs.Kind* constant, with the stat fields.
type Current struct {
	Kind     api.Kind
	Size     int64
	Mode     uint32 // st_mode, type and permission bits
	UID, GID uint32
	Nlink    uint64
	Dev, Ino uint64
	// Ctime is st_ctim in nanoseconds: when the inode last changed (its
	// content, names or metadata); a changeset's commit requires the
	// files it changes not to have changed since the command started.
	Ctime int64
	sum   *lazySum
	name  string
}

// Exists reports whether the name exists (as anything).
func (c Current) Exists() bool { return c.Kind != "" && c.Kind != KindAbsent }

// SHA256 returns "sha256:<hex>" of a regular file's content, read on the
// first call (copies of c share the result). The file is opened O_PATH
// and O_NOFOLLOW from the parent's fd, fstat-checked to be the regular
// file c describes (same device and inode: else ErrChanged), and only then
// re-opened for reading through /proc/self/fd, so a FIFO or device swapped
// in is never opened for I/O.
func (c Current) SHA256() (string, error) { return c.SHA256Context(context.Background()) }

// SHA256Context is SHA256 bounded by MaxHashBytes (above it ErrTooLarge,
// before anything is read when the size says so) that stops, with ctx's
// error, when ctx ends: a client that goes away frees the core and the
// name's lock.
func (c Current) SHA256Context(ctx context.Context) (string, error) {
	if c.Kind != securefs.KindFile {
		return "", &KindError{Name: c.name, Kind: c.kindOrAbsent()}
	}
	if c.sum == nil {
		return "", fmt.Errorf("sha256: %w", unix.EBADF)
	}
	if c.Size > MaxHashBytes {
		return "", fmt.Errorf("sha256 %q: %w: %d bytes, above the cap of %d", c.name, ErrTooLarge, c.Size, MaxHashBytes)
	}
	c.sum.once.Do(func() { c.sum.compute(ctx) })
	return c.sum.val, c.sum.err
}

func (c Current) kindOrAbsent() api.Kind {
	if c.Kind == "" {
		return KindAbsent
	}
	return c.Kind
}

type lazySum struct {
	once     sync.Once
	p        *Parent
	dev, ino uint64
	val      string
	n        int64 // bytes read
	err      error
}

func (s *lazySum) compute(ctx context.Context) {
	s.val, s.n, s.err = digestAt(ctx, s.p, s.p.Name, s.dev, s.ino)
}

// digestAt hashes the regular file name in p, which must be inode
// (dev, ino), reading at most MaxHashBytes and looking at ctx between
// chunks.
func digestAt(ctx context.Context, p *Parent, name string, dev, ino uint64) (string, int64, error) {
	defer runtime.KeepAlive(p)
	fd, err := unix.Openat(p.fd(), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return "", 0, fmt.Errorf("sha256 %q: %w (%v)", name, ErrChanged, err)
	}
	if err != nil {
		return "", 0, fmt.Errorf("sha256 %q: %w", name, err)
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	if err == nil && (st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != dev || st.Ino != ino) {
		err = ErrChanged
	}
	var rfd int
	if err == nil {
		rfd, err = unix.Open(procFd(fd), unix.O_RDONLY|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	}
	unix.Close(fd)
	if err != nil {
		return "", 0, fmt.Errorf("sha256 %q: %w", name, err)
	}
	f := os.NewFile(uintptr(rfd), name)
	defer f.Close()
	n, sum, err := hashBounded(ctx, f, MaxHashBytes)
	if err != nil {
		return "", 0, fmt.Errorf("sha256 %q: %w", name, err)
	}
	return sum, n, nil
}

// hashBounded hashes r to its end: at most limit bytes (more is
// ErrTooLarge: the file grew past the cap), checking ctx before each
// chunk.
func hashBounded(ctx context.Context, r io.Reader, limit int64) (int64, string, error) {
	h := sha256.New()
	buf := make([]byte, hashChunk)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return 0, "", err
		}
		m, err := io.ReadFull(r, buf)
		h.Write(buf[:m])
		n += int64(m)
		if n > limit {
			return 0, "", fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return n, "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
		}
		if err != nil {
			return 0, "", err
		}
	}
}

// Stat reads what the final name is now, without following it
// (fstatat AT_SYMLINK_NOFOLLOW on the parent's fd). A missing name is
// Kind KindAbsent, not an error.
func (p *Parent) Stat() (Current, error) {
	defer runtime.KeepAlive(p)
	var st unix.Stat_t
	err := unix.Fstatat(p.fd(), p.Name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.ENOENT {
		return Current{Kind: KindAbsent, name: p.Name}, nil
	}
	if err != nil {
		return Current{}, fmt.Errorf("stat %q: %w", p.Name, err)
	}
	c := Current{
		Kind:  kindOf(st.Mode),
		Size:  st.Size,
		Mode:  st.Mode,
		UID:   st.Uid,
		GID:   st.Gid,
		Nlink: st.Nlink,
		Dev:   st.Dev,
		Ino:   st.Ino,
		Ctime: st.Ctim.Nano(),
		name:  p.Name,
	}
	if c.Kind == securefs.KindFile {
		c.sum = &lazySum{p: p, dev: st.Dev, ino: st.Ino}
	}
	return c, nil
}

// DirCtime is the parent directory's st_ctim in nanoseconds: it moves
// whenever a name in it is made, removed or renamed.
func (p *Parent) DirCtime() (int64, error) {
	defer runtime.KeepAlive(p)
	var st unix.Stat_t
	if err := unix.Fstat(p.fd(), &st); err != nil {
		return 0, fmt.Errorf("stat the parent of %q: %w", p.Name, err)
	}
	return st.Ctim.Nano(), nil
}

// SyncDir fsyncs p's directory: what a caller that deferred the sync of
// several commits in it (WriteOptions.DeferDirSync) runs once after them.
func (p *Parent) SyncDir() error { return p.syncDir() }

// RemoveDir removes p's final name if it is an empty directory
// (unlinkat AT_REMOVEDIR in the held parent fd: never a file, never
// followed), then fsyncs the parent. A name that is not a directory any
// more is ErrChanged; a directory that is not empty fails ENOTEMPTY; an error from
// the fsync after the removal wraps ErrNotDurable.
func RemoveDir(p *Parent) error {
	defer runtime.KeepAlive(p)
	cur, err := p.Stat()
	if err != nil {
		return err
	}
	if cur.Kind != securefs.KindDir {
		return fmt.Errorf("%q is a %s now, not a directory: %w", p.Name, cur.kindOrAbsent(), ErrChanged)
	}
	if err := unix.Unlinkat(p.fd(), p.Name, unix.AT_REMOVEDIR); err != nil {
		return fmt.Errorf("remove directory %q: %w", p.Name, err)
	}
	if err := p.syncDir(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotDurable, err)
	}
	return nil
}

func kindOf(mode uint32) api.Kind {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return securefs.KindFile
	case unix.S_IFDIR:
		return securefs.KindDir
	case unix.S_IFLNK:
		return securefs.KindSymlink
	case unix.S_IFIFO:
		return securefs.KindFIFO
	case unix.S_IFSOCK:
		return securefs.KindSocket
	case unix.S_IFCHR, unix.S_IFBLK:
		return securefs.KindDevice
	}
	return securefs.KindOther
}

func procFd(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// TestHookSyncDir, set by tests only (before the calls it is for, and reset
// after), replaces fsync(2) on a directory: the seam through which tests
// make the fsync after a commit fail with EIO and see that the result says
// committed, not durable. The package is internal: only this module can
// set it.
var TestHookSyncDir func(fd int) error

// syncDir fsyncs the parent directory, so that a link, rename or unlink in
// it survives a crash. The O_PATH fd cannot be fsynced: it is re-opened
// through /proc/self/fd, which names the same inode.
func (p *Parent) syncDir() error {
	defer runtime.KeepAlive(p)
	fd, err := unix.Open(procFd(p.fd()), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("fsync dir: %w", err)
	}
	fsync := unix.Fsync
	if TestHookSyncDir != nil {
		fsync = TestHookSyncDir
	}
	err = fsync(fd)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("fsync dir: %w", err)
	}
	return nil
}
