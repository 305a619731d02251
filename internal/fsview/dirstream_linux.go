package fsview

import (
	"context"
	"strconv"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// dirBufSize is how much of a directory one getdents call reads: a
// readdir costs memory for one chunk, never for every name at once (a
// directory of a million entries is listed 32 KiB at a time).
const dirBufSize = 32 << 10

// dir is an open directory of the view: its fd (counted against its
// opener, like an open file), read in chunks as the kernel asks, each
// entry filtered as a lookup of it would be.
//
// It holds the O_PATH fd its opendir resolved and checked, and opens the
// directory for reading from it (through /proc/self/fd: the same inode,
// no lookup by path) only when the kernel first asks for entries. A
// watched directory's listing is mostly in the kernel's cache
// (FOPEN_CACHE_DIR), so most opendirs of a tree walk never read: they
// cost sluiced no open (bench/exec.sh --views, docs/performance.md).
type dir struct {
	n   *node
	own *holder

	mu   sync.Mutex
	path int // the resolved O_PATH fd, until fd is opened from it (then -1)
	fd   int // open for reading (-1 until the first read)
	buf  []byte
	todo []byte
	// next is the entry HasNext found and Next hands out.
	next    *fuse.DirEntry
	errno   syscall.Errno
	eof     bool
	relBase string
	// dev and ino are the directory fd holds (see fill).
	dev, ino uint64
}

var (
	_ fs.FileReaddirenter = (*dir)(nil)
	_ fs.FileSeekdirer    = (*dir)(nil)
	_ fs.FileReleasedirer = (*dir)(nil)
)

func newDir(n *node, path int, own *holder, st *unix.Stat_t) *dir {
	d := &dir{n: n, own: own, path: path, fd: -1, dev: uint64(st.Dev), ino: st.Ino}
	if n.rel != "" {
		d.relBase = n.rel + "/"
	}
	return d
}

// fill finds the next shown entry, reading another chunk when the last is
// used up. d.mu is held.
func (d *dir) fill() {
	for d.next == nil && d.errno == 0 && !d.eof {
		if len(d.todo) == 0 {
			if d.buf == nil {
				d.buf = make([]byte, dirBufSize)
			}
			d.n.v.stats.reads.Add(1)
			n, err := unix.Getdents(d.fd, d.buf)
			if err != nil {
				d.errno = syscall.EIO
				return
			}
			if n == 0 {
				d.eof = true
				d.buf = nil // nothing more to read: give the chunk back
				return
			}
			if !d.named() {
				// The directory is no longer at the node's path
				// (renamed away, maybe to a never name, where the host
				// may add names): what fd reads now is not what the
				// path shows. The listing ends here
				// (TestHeldDirRenamedToNever), with an error, as a
				// getdents of a removed directory does: an end of
				// listing would let the kernel keep what it got so
				// far as the node's whole listing (FOPEN_CACHE_DIR),
				// shown to every opendir once the directory is
				// renamed back (TestReview8RenamedAwayAndBackListsWhole).
				d.errno, d.buf = syscall.ENOENT, nil
				return
			}
			d.todo = d.buf[:n]
		}
		var de fuse.DirEntry
		used := de.Parse(d.todo)
		d.todo = d.todo[used:]
		if e, ok := d.shown(de); ok {
			d.next = &e
		}
	}
}

// named reports whether the node's path names the directory d reads,
// checked after each chunk is read: a name listed was in the directory
// while the path still named it.
func (d *dir) named() bool {
	h, errno := d.n.resolve()
	if errno != 0 {
		return false
	}
	defer h.Close()
	return uint64(h.Stat.Dev) == d.dev && h.Stat.Ino == d.ino
}

// shown applies the view's rules to one entry: the never globs by its
// path from the mount, then its type, read with fstatat on the held
// directory fd without following it (one name, no path to lead
// elsewhere). The entry's offset is the directory's own, so Seekdir can
// go back to it.
func (d *dir) shown(de fuse.DirEntry) (fuse.DirEntry, bool) {
	if de.Name == "." || de.Name == ".." || de.Name == "" {
		return de, false
	}
	if h := d.n.hide; h != nil && h(d.n.m, d.relBase+de.Name) {
		return de, false
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, de.Name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return de, false
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR, unix.S_IFREG, unix.S_IFLNK:
		return fuse.DirEntry{Name: de.Name, Mode: st.Mode & unix.S_IFMT, Ino: st.Ino, Off: de.Off}, true
	}
	return de, false
}

// ready opens the directory for reading from its O_PATH fd, once (d.mu
// held); the O_PATH fd is closed then, so a dir holds one fd, as counted.
func (d *dir) ready() syscall.Errno {
	if d.fd >= 0 {
		return 0
	}
	if d.path < 0 {
		return syscall.EBADF
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(d.path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return openErrno(err)
	}
	unix.Close(d.path)
	d.path, d.fd = -1, fd
	d.n.v.stats.dirFDs.Add(1)
	return 0
}

func (d *dir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if errno := d.ready(); errno != 0 {
		return nil, errno
	}
	d.fill()
	if d.next == nil {
		errno := d.errno
		d.errno = 0
		return nil, errno
	}
	e := d.next
	d.next = nil
	return e, 0
}

// Seekdir goes back (or on) to an offset the stream handed out, or 0.
func (d *dir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if errno := d.ready(); errno != 0 {
		return errno
	}
	if _, err := unix.Seek(d.fd, int64(off), unix.SEEK_SET); err != nil {
		return syscall.EINVAL
	}
	d.todo, d.next, d.errno, d.eof = nil, nil, 0, false
	return 0
}

func (d *dir) Releasedir(ctx context.Context, releaseFlags uint32) {
	d.n.v.untrack(d)
	d.release()
}

func (d *dir) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 && d.path < 0 {
		return
	}
	for _, fd := range []int{d.fd, d.path} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	d.fd, d.path = -1, -1
	d.buf, d.todo, d.next = nil, nil, nil
	give(d.own)
}
