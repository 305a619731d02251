package securefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
)

// Sentinel errors. Callers classify with errors.Is; the wrapped errno is
// kept for logs.
var (
	// ErrPathEscapes: resolution would leave the root (EXDEV from openat2:
	// "..", an absolute or climbing symlink), or crossed a magic link or a
	// symlink loop (ELOOP).
	ErrPathEscapes = errors.New("path escapes the root")
	// ErrNotExist: a component is missing (or is not a directory) beneath
	// the root. Only ever returned for lookups that stayed beneath it.
	ErrNotExist = fs.ErrNotExist
	// ErrInvalidPath: the kernel refused the name itself (ENAMETOOLONG).
	ErrInvalidPath = errors.New("invalid path")
	// ErrNotSupported: the kernel lacks openat2; the fallback is used.
	ErrNotSupported = errors.New("openat2 not supported by this kernel")
)

// Mode selects the resolver.
type Mode int

const (
	// ModeAuto uses openat2 and falls back to os.Root on ENOSYS.
	ModeAuto Mode = iota
	// ModeOpenat2 uses openat2 only; ENOSYS is an error.
	ModeOpenat2
	// ModeFallback uses the os.Root resolver only (for tests and old kernels).
	ModeFallback
)

func (m Mode) String() string {
	switch m {
	case ModeOpenat2:
		return "openat2"
	case ModeFallback:
		return "fallback"
	}
	return "auto"
}

// noOpenat2 latches once the kernel has said ENOSYS.
var noOpenat2 atomic.Bool

// maxRetries bounds EAGAIN retries: openat2 returns EAGAIN when a rename or
// mount raced a ".." lookup; an attacker renaming in a loop must not be
// able to spin the daemon forever.
const maxRetries = 128

// Root is a directory held open by fd. Everything resolved through it lies
// beneath it, by the kernel's word.
type Root struct {
	fd     *os.File // O_PATH|O_DIRECTORY
	osRoot *os.Root // only in fallback mode
	mode   Mode
	path   atomic.Pointer[string] // last known absolute path of the root
}

// OpenRoot opens dir, an absolute path from trusted configuration, as a root.
func OpenRoot(dir string, mode Mode) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root %s: %w", dir, classify(err))
	}
	return newRoot(os.NewFile(uintptr(fd), dir), mode)
}

func newRoot(f *os.File, mode Mode) (*Root, error) {
	r := &Root{fd: f, mode: mode}
	if r.useFallback() {
		or, err := os.OpenRoot(procPath(f))
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("open root %s: %w", f.Name(), err)
		}
		r.osRoot = or
	}
	return r, nil
}

func (r *Root) useFallback() bool {
	return r.mode == ModeFallback || (r.mode == ModeAuto && noOpenat2.Load())
}

// Mode reports the resolver this root uses.
func (r *Root) Mode() Mode {
	if r.useFallback() {
		return ModeFallback
	}
	return ModeOpenat2
}

// Close releases the root's fds.
func (r *Root) Close() error {
	if r.osRoot != nil {
		r.osRoot.Close()
	}
	return r.fd.Close()
}

// Fd returns the O_PATH fd of the root (valid while r is open).
func (r *Root) Fd() uintptr { return r.fd.Fd() }

// Path returns the root's current absolute path, as the kernel names it.
func (r *Root) Path() (string, error) { return fdPath(r.fd) }

// Locate returns the absolute path of what h names and that path relative
// to r ("." for r itself), both as the kernel names the fds. The root's
// path is cached and re-read once when it does not prefix the handle's
// (the root was renamed); if it still does not, that is an error: callers
// fail closed.
func (r *Root) Locate(h *Handle) (abs, rel string, err error) {
	abs, err = h.Path()
	if err != nil {
		return "", "", err
	}
	for attempt := 0; attempt < 2; attempt++ {
		rp := r.path.Load()
		if rp == nil || attempt == 1 {
			p, err := r.Path()
			if err != nil {
				return "", "", err
			}
			r.path.Store(&p)
			rp = &p
		}
		if rel, ok := relTo(*rp, abs); ok {
			return abs, rel, nil
		}
	}
	return "", "", fmt.Errorf("locate: %q is not beneath the root", abs)
}

// RelOf returns sub's path relative to r ("." for r itself), both as the
// kernel names their fds now; an error when sub is not beneath r.
func (r *Root) RelOf(sub *Root) (string, error) {
	rp, err := r.Path()
	if err != nil {
		return "", err
	}
	abs, err := sub.Path()
	if err != nil {
		return "", err
	}
	if rel, ok := relTo(rp, abs); ok {
		return rel, nil
	}
	return "", fmt.Errorf("locate: %q is not beneath %q", abs, rp)
}

func relTo(root, p string) (string, bool) {
	switch {
	case p == root:
		return ".", true
	case root == "/":
		return p[1:], strings.HasPrefix(p, "/") && len(p) > 1
	case len(p) > len(root) && p[len(root)] == '/' && p[:len(root)] == root:
		return p[len(root)+1:], true
	}
	return "", false
}

// OpenRootBeneath opens a directory beneath r as a new root: how the daemon
// turns a manifest's roots, relative to base, into held fds.
func (r *Root) OpenRootBeneath(unsafePath string) (*Root, error) {
	h, err := r.Resolve(unsafePath)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return r.RootOf(h)
}

// RootOf makes a new root of the directory h names (h stays the
// caller's): the same inode, never looked up again by path.
func (r *Root) RootOf(h *Handle) (*Root, error) {
	if h.Kind != KindDir {
		return nil, fmt.Errorf("open root %s: %w", h.f.Name(), unix.ENOTDIR)
	}
	fd, err := unix.Open(procPath(h.f), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	runtime.KeepAlive(h.f)
	if err != nil {
		return nil, fmt.Errorf("open root %s: %w", h.f.Name(), classify(err))
	}
	return newRoot(os.NewFile(uintptr(fd), h.f.Name()), r.mode)
}

// File kinds, from fstat of the resolved fd: the one api.Kind type.
const (
	KindFile    = api.KindFile
	KindDir     = api.KindDir
	KindSymlink = api.KindSymlink
	KindFIFO    = api.KindFIFO
	KindSocket  = api.KindSocket
	KindDevice  = api.KindDevice
	KindOther   = api.KindOther
)

// Handle is a resolved path: an fd on the object (O_PATH with openat2) and
// what fstat said of it.
type Handle struct {
	f    *os.File
	mode Mode
	Kind api.Kind
	Stat unix.Stat_t
}

// File returns the handle's fd (O_PATH with openat2; O_RDONLY with the
// fallback). It stays owned by the handle.
func (h *Handle) File() *os.File { return h.f }

// Close releases the handle's fd.
func (h *Handle) Close() error {
	if h.f == nil {
		return nil
	}
	return h.f.Close()
}

// Path returns the absolute path of the resolved object, as the kernel
// names the fd (readlink /proc/self/fd/N): what was really opened.
func (h *Handle) Path() (string, error) {
	if h.f == nil {
		return "", fmt.Errorf("path: %w", unix.ENXIO)
	}
	return fdPath(h.f)
}

// Resolve resolves unsafePath beneath r, following symlinks only while they
// stay beneath r, and returns a handle on what it names. The final
// component's symlink is followed too; a path naming a symlink that leaves
// the root fails with ErrPathEscapes.
func (r *Root) Resolve(unsafePath string) (*Handle, error) {
	if strings.IndexByte(unsafePath, 0) >= 0 {
		return nil, fmt.Errorf("resolve %q: %w", unsafePath, ErrInvalidPath)
	}
	if r.useFallback() {
		return r.resolveFallback(unsafePath)
	}
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	var fd int
	var err error
	for range maxRetries {
		fd, err = unix.Openat2(int(r.fd.Fd()), unsafePath, &how)
		if err != unix.EAGAIN && err != unix.EINTR {
			break
		}
	}
	runtime.KeepAlive(r.fd)
	if err == unix.ENOSYS {
		if r.mode == ModeOpenat2 {
			return nil, fmt.Errorf("resolve %q: %w", unsafePath, ErrNotSupported)
		}
		noOpenat2.Store(true)
		if r.osRoot == nil {
			or, oerr := os.OpenRoot(procPath(r.fd))
			if oerr != nil {
				return nil, fmt.Errorf("resolve %q: open fallback root: %w", unsafePath, oerr)
			}
			r.osRoot = or
		}
		return r.resolveFallback(unsafePath)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %q: %w", unsafePath, classify(err))
	}
	f := os.NewFile(uintptr(fd), unsafePath)
	h := &Handle{f: f, mode: ModeOpenat2}
	if err := h.stat(); err != nil {
		f.Close()
		return nil, err
	}
	return h, nil
}

// resolveFallback uses os.Root, which opens one component at a time with
// O_NOFOLLOW and resolves symlinks itself, refusing any that leave the root.
// It cannot open O_PATH (the last component would be the link itself), so it
// opens O_RDONLY|O_NONBLOCK: a FIFO opens without blocking, then fstat
// tells the caller what it got.
func (r *Root) resolveFallback(unsafePath string) (*Handle, error) {
	f, err := r.osRoot.OpenFile(unsafePath, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		var errno unix.Errno
		if errors.As(err, &errno) && errno == unix.ENXIO {
			// A unix socket cannot be opened; stat says what it is.
			if fi, serr := r.osRoot.Stat(unsafePath); serr == nil && fi.Mode()&fs.ModeSocket != 0 {
				return &Handle{mode: ModeFallback, Kind: KindSocket}, nil
			}
		}
		return nil, fmt.Errorf("resolve %q: %w", unsafePath, classifyRootErr(err))
	}
	h := &Handle{f: f, mode: ModeFallback}
	if err := h.stat(); err != nil {
		f.Close()
		return nil, err
	}
	return h, nil
}

func (h *Handle) stat() error {
	if err := unix.Fstat(int(h.f.Fd()), &h.Stat); err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	runtime.KeepAlive(h.f)
	h.Kind = kindOf(h.Stat.Mode)
	return nil
}

func kindOf(mode uint32) api.Kind {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return KindFile
	case unix.S_IFDIR:
		return KindDir
	case unix.S_IFLNK:
		return KindSymlink
	case unix.S_IFIFO:
		return KindFIFO
	case unix.S_IFSOCK:
		return KindSocket
	case unix.S_IFCHR, unix.S_IFBLK:
		return KindDevice
	}
	return KindOther
}

// Open returns a file open for reading on the handle's object: a regular
// file or a directory, nothing else (a FIFO or device is refused before
// any open that could block or have side effects). The O_PATH fd is
// re-opened through /proc/self/fd, which names the same inode: there is no
// second lookup by path.
func (h *Handle) Open() (*os.File, error) {
	if h.f == nil {
		return nil, fmt.Errorf("open: %w", unix.ENXIO)
	}
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY
	switch h.Kind {
	case KindFile:
	case KindDir:
		flags |= unix.O_DIRECTORY
	default:
		return nil, fmt.Errorf("open %s: refusing a %s", h.f.Name(), h.Kind)
	}
	if h.mode == ModeFallback {
		// Already open for reading; hand out an independent fd.
		fd, err := unix.FcntlInt(h.f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		runtime.KeepAlive(h.f)
		if err != nil {
			return nil, fmt.Errorf("dup: %w", err)
		}
		if err := unix.SetNonblock(fd, false); err != nil {
			unix.Close(fd)
			return nil, err
		}
		return os.NewFile(uintptr(fd), h.f.Name()), nil
	}
	fd, err := unix.Open(procPath(h.f), flags, 0)
	runtime.KeepAlive(h.f)
	if err != nil {
		return nil, fmt.Errorf("reopen %s: %w", h.f.Name(), err)
	}
	return os.NewFile(uintptr(fd), h.f.Name()), nil
}

func procPath(f *os.File) string {
	return "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
}

func fdPath(f *os.File) (string, error) {
	p, err := os.Readlink(procPath(f))
	runtime.KeepAlive(f)
	if err != nil {
		return "", fmt.Errorf("readlink fd: %w", err)
	}
	return p, nil
}

// classify maps an errno from openat2 or open to a sentinel.
func classify(err error) error {
	switch err {
	case unix.EXDEV, unix.ELOOP:
		return fmt.Errorf("%w (%w)", ErrPathEscapes, err)
	case unix.ENOENT, unix.ENOTDIR:
		return fmt.Errorf("%w (%w)", ErrNotExist, err)
	case unix.ENAMETOOLONG, unix.EINVAL:
		return fmt.Errorf("%w (%w)", ErrInvalidPath, err)
	}
	return err
}

// classifyRootErr maps os.Root's errors. Anything it does not name as
// missing or invalid is treated as an escape: fail closed.
func classifyRootErr(err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		switch errno {
		case unix.ENOENT, unix.ENOTDIR:
			return fmt.Errorf("%w (%w)", ErrNotExist, err)
		case unix.ENAMETOOLONG, unix.EINVAL:
			return fmt.Errorf("%w (%w)", ErrInvalidPath, err)
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (%w)", ErrNotExist, err)
	}
	return fmt.Errorf("%w (%w)", ErrPathEscapes, err)
}

// ResolveNoFollow resolves unsafePath beneath r without following any
// symlink, in any component: a symlink as the last component yields a
// handle on the link itself (Kind KindSymlink), a symlink anywhere before
// it fails with ErrPathEscapes. The handle's fd is always O_PATH, in both
// modes. This is the lookup a view serves each name with: what it names
// is what the path names now, never what a link points to.
func (r *Root) ResolveNoFollow(unsafePath string) (*Handle, error) {
	if strings.IndexByte(unsafePath, 0) >= 0 {
		return nil, fmt.Errorf("resolve %q: %w", unsafePath, ErrInvalidPath)
	}
	if unsafePath == "" {
		unsafePath = "."
	}
	var fd int
	var err error
	if r.useFallback() {
		fd, err = walkNoFollow(int(r.fd.Fd()), unsafePath)
	} else {
		how := unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_SYMLINKS,
		}
		for range maxRetries {
			fd, err = unix.Openat2(int(r.fd.Fd()), unsafePath, &how)
			if err != unix.EAGAIN && err != unix.EINTR {
				break
			}
		}
		if err == unix.ENOSYS && r.mode != ModeOpenat2 {
			noOpenat2.Store(true)
			fd, err = walkNoFollow(int(r.fd.Fd()), unsafePath)
		}
	}
	runtime.KeepAlive(r.fd)
	if err != nil {
		return nil, fmt.Errorf("resolve %q: %w", unsafePath, classify(err))
	}
	h := &Handle{f: os.NewFile(uintptr(fd), unsafePath), mode: ModeOpenat2}
	if err := h.stat(); err != nil {
		h.f.Close()
		return nil, err
	}
	return h, nil
}

// walkNoFollow is ResolveNoFollow without openat2: one component at a
// time with O_PATH|O_NOFOLLOW. ".." is refused outright, so every step
// stays beneath dirfd; a symlink before the last component ends the walk
// (openat through a link's O_PATH fd fails ENOTDIR, reported as ELOOP).
func walkNoFollow(dirfd int, rel string) (int, error) {
	cur := -1
	defer func() {
		if cur >= 0 {
			unix.Close(cur)
		}
	}()
	at := dirfd
	parts := strings.Split(rel, "/")
	for i, name := range parts {
		if name == "" || name == "." {
			if i == len(parts)-1 && cur < 0 {
				return unix.Openat(dirfd, ".", unix.O_PATH|unix.O_CLOEXEC, 0)
			}
			continue
		}
		if name == ".." {
			return -1, unix.EXDEV
		}
		fd, err := unix.Openat(at, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if err == unix.ENOTDIR {
				var st unix.Stat_t
				if unix.Fstat(at, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
					err = unix.ELOOP
				}
			}
			return -1, err
		}
		if cur >= 0 {
			unix.Close(cur)
		}
		cur, at = fd, fd
	}
	if cur < 0 {
		return unix.Openat(dirfd, ".", unix.O_PATH|unix.O_CLOEXEC, 0)
	}
	fd := cur
	cur = -1
	return fd, nil
}

// Readlink returns the target of the symlink the handle names (from
// ResolveNoFollow), read from its fd: the link is never looked up again.
func (h *Handle) Readlink() (string, error) {
	if h.f == nil || h.Kind != KindSymlink {
		return "", fmt.Errorf("readlink: %w", unix.EINVAL)
	}
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(int(h.f.Fd()), "", buf)
	runtime.KeepAlive(h.f)
	if err != nil {
		return "", fmt.Errorf("readlink: %w", err)
	}
	return string(buf[:n]), nil
}
