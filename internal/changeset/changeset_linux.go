package changeset

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Kind is what an entry is.
type Kind int

const (
	File     Kind = iota // a regular file, created or modified
	Dir                  // a directory, made or holding changes
	Whiteout             // a deletion of what the lower layer had
)

func (k Kind) String() string {
	switch k {
	case File:
		return "file"
	case Dir:
		return "dir"
	case Whiteout:
		return "whiteout"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Entry is one entry of the upper layer.
type Entry struct {
	Path string // slash-separated, clean, relative to the layer
	Kind Kind
	// Opaque: a directory whose lower contents are hidden
	// (trusted.overlay.opaque): the command removed the directory and
	// made it again, or made it where the lower layer had none.
	Opaque bool
	Mode   uint32 // permission bits (set-id bits never pass Read)
	Size   int64
	SHA256 string // "sha256:<hex>" for files
}

// BadEntryError refuses an entry that may not be part of a changeset: a
// symlink, FIFO, socket, device (other than a whiteout), hard-linked
// file, set-id mode, or overlay metadata sluice does not read.
type BadEntryError struct {
	Path, Why string
}

func (e *BadEntryError) Error() string {
	return fmt.Sprintf("changeset: %s: %s", e.Path, e.Why)
}

// ErrTooManyEntries is returned by Read beyond maxEntries.
var ErrTooManyEntries = errors.New("changeset: too many entries")

// Overlay's extended attributes on the upper layer (trusted.*: the
// overlay sluice mounts is not userxattr).
const (
	xattrOpaque   = "trusted.overlay.opaque"
	xattrRedirect = "trusted.overlay.redirect"
	xattrMetacopy = "trusted.overlay.metacopy"
)

const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS

func openat2(dirfd int, name string, flags int) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC), Resolve: resolve}
	for range 16 {
		fd, err := unix.Openat2(dirfd, name, &how)
		if err != unix.EAGAIN && err != unix.EINTR {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// Read lists the upper layer held open as upper (an O_PATH or O_RDONLY
// directory fd), sorted by path (so parents come before their children),
// at most maxEntries of them (else ErrTooManyEntries). The layer must not
// change meanwhile (the box's processes are dead). The first bad entry
// ends it with a *BadEntryError.
func Read(upper *os.File, maxEntries int) ([]Entry, error) {
	top, err := openat2(int(upper.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("changeset: open upper: %w", err)
	}
	r := &reader{max: maxEntries}
	err = r.dir(top, "")
	unix.Close(top)
	if err != nil {
		return nil, err
	}
	sort.Slice(r.out, func(i, j int) bool { return r.out[i].Path < r.out[j].Path })
	return r.out, nil
}

type reader struct {
	max int
	out []Entry
}

func (r *reader) add(e Entry) error {
	if len(r.out) >= r.max {
		return ErrTooManyEntries
	}
	r.out = append(r.out, e)
	return nil
}

// dir reads the directory held as fd (at rel; "" for the top) and
// everything beneath it.
func (r *reader) dir(fd int, rel string) error {
	// Read the names through a dup: os.File owns and closes its fd.
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	unix.CloseOnExec(dup)
	d := os.NewFile(uintptr(dup), rel)
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("changeset: read %s: %w", show(rel), err)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := r.entry(fd, rel, name); err != nil {
			return err
		}
	}
	return nil
}

func show(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

func (r *reader) entry(dirfd int, parent, name string) error {
	p := path.Join(parent, name)
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return &BadEntryError{Path: p, Why: "bad name"}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("changeset: stat %s: %w", p, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if st.Rdev != 0 {
			return &BadEntryError{Path: p, Why: "a device"}
		}
		// A whiteout can carry no data and no xattr of interest.
		return r.add(Entry{Path: p, Kind: Whiteout})
	case unix.S_IFLNK:
		return &BadEntryError{Path: p, Why: "a symlink"}
	case unix.S_IFIFO:
		return &BadEntryError{Path: p, Why: "a FIFO"}
	case unix.S_IFSOCK:
		return &BadEntryError{Path: p, Why: "a socket"}
	case unix.S_IFBLK:
		return &BadEntryError{Path: p, Why: "a device"}
	case unix.S_IFDIR:
		fd, err := openat2(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK)
		if err != nil {
			return fmt.Errorf("changeset: open %s: %w", p, err)
		}
		defer unix.Close(fd)
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("changeset: stat %s: %w", p, err)
		}
		if err := setID(p, st.Mode); err != nil {
			return err
		}
		x, err := overlayXattrs(fd, p)
		if err != nil {
			return err
		}
		opaque := false
		switch v, ok := x[xattrOpaque]; {
		case !ok:
		case v == "y":
			opaque = true
		default:
			return &BadEntryError{Path: p, Why: fmt.Sprintf("overlay opaque %q (xattr whiteouts) not read", v)}
		}
		if err := r.add(Entry{Path: p, Kind: Dir, Opaque: opaque, Mode: st.Mode & 0o7777}); err != nil {
			return err
		}
		return r.dir(fd, p)
	case unix.S_IFREG:
		fd, err := openat2(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK)
		if err != nil {
			return fmt.Errorf("changeset: open %s: %w", p, err)
		}
		f := os.NewFile(uintptr(fd), p)
		defer f.Close()
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("changeset: stat %s: %w", p, err)
		}
		if err := fileOK(p, &st); err != nil {
			return err
		}
		if _, err := overlayXattrs(fd, p); err != nil {
			return err
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return fmt.Errorf("changeset: read %s: %w", p, err)
		}
		if n != st.Size {
			return fmt.Errorf("changeset: %s changed while read", p)
		}
		return r.add(Entry{Path: p, Kind: File, Mode: st.Mode & 0o7777, Size: n, SHA256: "sha256:" + hex.EncodeToString(h.Sum(nil))})
	}
	return &BadEntryError{Path: p, Why: "unknown file type"}
}

func setID(p string, mode uint32) error {
	if mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		return &BadEntryError{Path: p, Why: fmt.Sprintf("set-id mode %04o", mode&0o7777)}
	}
	return nil
}

// fileOK checks a regular file's stat: one link, no set-id bit.
func fileOK(p string, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return &BadEntryError{Path: p, Why: "not a regular file"}
	}
	if st.Nlink > 1 {
		return &BadEntryError{Path: p, Why: fmt.Sprintf("a hard link (%d links)", st.Nlink)}
	}
	return setID(p, st.Mode)
}

// overlayXattrs returns the trusted.overlay.* xattrs of fd, refusing a
// redirect or metacopy (the overlay is mounted without them: one found
// was not made by it).
func overlayXattrs(fd int, p string) (map[string]string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Flistxattr(fd, buf)
	if err == unix.ERANGE {
		sz, err2 := unix.Flistxattr(fd, nil)
		if err2 != nil {
			return nil, fmt.Errorf("changeset: xattrs of %s: %w", p, err2)
		}
		buf = make([]byte, sz)
		n, err = unix.Flistxattr(fd, buf)
	}
	if err == unix.ENOTSUP {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("changeset: xattrs of %s: %w", p, err)
	}
	var out map[string]string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(name, "trusted.overlay.") {
			continue
		}
		switch name {
		case xattrRedirect:
			return nil, &BadEntryError{Path: p, Why: "an overlay redirect"}
		case xattrMetacopy:
			return nil, &BadEntryError{Path: p, Why: "an overlay metacopy"}
		}
		v := make([]byte, 256)
		m, err := unix.Fgetxattr(fd, name, v)
		if err != nil {
			return nil, fmt.Errorf("changeset: xattr %s of %s: %w", name, p, err)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = string(v[:m])
	}
	return out, nil
}

// Open opens the regular file at rel (an Entry's Path) beneath upper
// for reading, by the same rules as Read: no symlink, no other mount, a
// regular file of one link and no set-id bit.
func Open(upper *os.File, rel string) (*os.File, error) {
	if rel == "" || path.Clean(rel) != rel || path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, &BadEntryError{Path: rel, Why: "bad path"}
	}
	fd, err := openat2(int(upper.Fd()), rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("changeset: open %s: %w", rel, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("changeset: stat %s: %w", rel, err)
	}
	if err := fileOK(rel, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), rel), nil
}
