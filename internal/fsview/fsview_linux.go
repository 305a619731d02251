package fsview

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/securefs"
)

// Source is one mount of a view: a directory held open (Name empty), or
// the regular file Name directly beneath it. A file mount is looked up by
// name in its directory at every open, like any other node, so a host
// save that renames a new file over it shows, and a symlink put in its
// place shows nothing.
type Source struct {
	Root *securefs.Root
	Name string
}

// Options tune a view.
type Options struct {
	// Hide reports whether the entry at rel (slash-separated, relative
	// to mount i; never "") is hidden: it then does not exist in the
	// view, nor does anything beneath it.
	Hide func(i int, rel string) bool
	// Timeout is how long the kernel may cache names and attributes in a
	// directory the view could not watch (default 1 s): the longest a
	// host edit takes to show there. Lookups that fail are never cached,
	// so a new file shows at once; a cached name still resolves its path
	// again on every open, opendir and readlink.
	Timeout time.Duration
	// CacheTimeout is how long the kernel may cache names, attributes
	// and listings of a watched directory (default DefaultCacheTimeout):
	// every host change there invalidates them at once (see
	// watch_linux.go), so this only bounds what a change inotify does not
	// report (a write through a shared mapping, a hard link changed
	// through another directory) may keep stale.
	CacheTimeout time.Duration
	// Logger, if set, receives go-fuse's diagnostics.
	Logger *log.Logger
	// MaxOpen bounds the files and directories one admitted uid (one
	// container) holds open through the view at once; beyond it, open
	// and opendir fail with EMFILE. Zero means DefaultMaxOpen.
	MaxOpen int
	// RefuseLinks refuses to open a regular file with more than one link
	// (EACCES): another of its names, which Hide never sees, may be
	// hidden (a hard link to .env under an innocent name). Its name and
	// attributes still show, as a file tool's listing shows them.
	RefuseLinks bool
	// Writable lists the mounts (by index; shorter than the sources:
	// the rest are false) presented as writable to everyone: files with
	// mode|0666, directories with mode|0777 and no sticky bit. The view
	// itself stays read-only; it is meant as the lower layer of an
	// overlay whose writes land in a scratch layer (sandbox.ScratchSpec),
	// where the container's uid, which owns nothing on the host, must be
	// able to create, modify and delete anywhere. The host's mode bits
	// then no longer keep a file from being read there; hidden entries
	// stay hidden.
	Writable []bool
}

// DefaultMaxOpen is Options.MaxOpen's default (the manifest's
// max_open_files).
const DefaultMaxOpen = 256

// DefaultCacheTimeout is Options.CacheTimeout's default.
const DefaultCacheTimeout = 10 * time.Minute

// View is a mounted view. Mount i is the entry named strconv.Itoa(i) in
// its root directory.
type View struct {
	dir    string
	server *fuse.Server
	srcs   []Source
	done   chan struct{}
	once   sync.Once
	closed atomic.Bool // Close was called (see Diag)
	conn   uint32      // the kernel's connection number (see Diag)
	max    int64
	links  bool   // Options.RefuseLinks
	rw     []bool // Options.Writable
	root   *rootNode
	w      *watcher
	// short and long are the cache timeouts of unwatched and watched
	// directories.
	short, long time.Duration

	mu   sync.RWMutex
	uids map[uint32]*holder // admitted callers (see Admit)

	// open holds the view's open files and directories until their
	// release. The kernel does not always send a release before the
	// connection ends (a container killed while the view is detached),
	// and go-fuse calls none then: what is left is closed when the
	// server stops, so no fd of ours outlives the view.
	hmu  sync.Mutex
	open map[releaser]struct{}
	// Passthrough reports whether the kernel agreed to FUSE passthrough
	// (reads go straight to the backing file).
	Passthrough bool

	stats struct{ lookups, opendirs, dirFDs, reads atomic.Int64 }
}

// Stats counts the requests that reached a view's server: what the
// kernel could not answer from its caches.
type Stats struct {
	Lookups  int64 // names looked up (also each entry of a READDIRPLUS)
	Opendirs int64 // directories opened
	DirFDs   int64 // of those, opened for reading on the host (the kernel asked for entries)
	Readdirs int64 // chunks of a directory read from the host (getdents)
}

// Stats reports the requests served so far.
func (v *View) Stats() Stats {
	return Stats{Lookups: v.stats.lookups.Load(), Opendirs: v.stats.opendirs.Load(), DirFDs: v.stats.dirFDs.Load(), Readdirs: v.stats.reads.Load()}
}

// Mount serves srcs at dir (an empty directory of the caller's). The view
// takes ownership of the sources' roots: they are closed once the last
// user of the view is gone (see Close), never while a request may use
// them.
func Mount(dir string, srcs []Source, opt Options) (*View, error) {
	if opt.Timeout <= 0 {
		opt.Timeout = time.Second
	}
	if opt.CacheTimeout <= 0 {
		opt.CacheTimeout = DefaultCacheTimeout
	}
	// A name found missing in a watched directory is cached as missing:
	// its creation is an event that drops it (node.Lookup marks the others
	// uncached). git status looks up a .gitignore in every directory.
	neg := opt.CacheTimeout
	if opt.MaxOpen <= 0 {
		opt.MaxOpen = DefaultMaxOpen
	}
	setBudget()
	setWatchBudget()
	v := &View{dir: dir, srcs: srcs, done: make(chan struct{}), max: int64(opt.MaxOpen), links: opt.RefuseLinks, rw: opt.Writable, uids: map[uint32]*holder{},
		short: opt.Timeout, long: opt.CacheTimeout}
	root := &rootNode{v: v, hide: opt.Hide}
	v.root = root
	w := newWatcher(v)
	v.w = w
	fopts := &fs.Options{
		EntryTimeout:    &opt.Timeout,
		AttrTimeout:     &opt.Timeout,
		NegativeTimeout: &neg,
		MountOptions: fuse.MountOptions{
			// Containers run as other uids; who may use the view is
			// decided per request (see View.caller), not by the kernel.
			AllowOther: true,
			// The kernel checks mode bits against the caller, as on the
			// host: a file the container's uid may not read stays closed.
			Options:           []string{"default_permissions"},
			FsName:            "sluice-view",
			Name:              "sluice",
			DirectMountStrict: true,
			DirectMountFlags:  unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV,
			DisableXAttrs:     true,
			MaxBackground:     64,
			Logger:            opt.Logger,
		},
		Logger: opt.Logger,
	}
	if opt.Logger == nil {
		quiet := log.New(discard{}, "", 0)
		fopts.MountOptions.Logger, fopts.Logger = quiet, quiet
	}
	server, err := fs.Mount(dir, root, fopts)
	if err != nil {
		w.close()
		for _, s := range srcs {
			s.Root.Close()
		}
		return nil, fmt.Errorf("mount view at %s: %w", dir, err)
	}
	v.server = server
	v.conn = connOf(dir)
	v.Passthrough = server.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH != 0
	w.start()
	go func() {
		server.Wait()
		w.close()
		v.releaseAll()
		for _, s := range srcs {
			s.Root.Close()
		}
		close(v.done)
	}()
	return v, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Dir is where the view is mounted.
func (v *View) Dir() string { return v.dir }

// Path is where mount i shows.
func (v *View) Path(i int) string { return v.dir + "/" + strconv.Itoa(i) }

// Close detaches the view. Binds of it that containers still hold keep
// working until those containers are gone; then the kernel ends the
// connection, the server stops and the roots are closed (Done).
func (v *View) Close() {
	v.once.Do(func() {
		v.closed.Store(true)
		if err := unix.Unmount(v.dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			// Not mounted any more is fine; anything else, end the
			// connection from our side.
			v.server.Unmount()
		}
	})
}

// Done is closed once the server has stopped and the roots are closed.
func (v *View) Done() <-chan struct{} { return v.done }

// rootNode is the view's synthetic top directory: one entry per mount.
type rootNode struct {
	fs.Inode
	v    *View
	hide func(int, string) bool
}

var (
	_ fs.NodeLookuper  = (*rootNode)(nil)
	_ fs.NodeOpendirer = (*rootNode)(nil)
	_ fs.NodeReaddirer = (*rootNode)(nil)
	_ fs.NodeGetattrer = (*rootNode)(nil)
	_ fs.NodeStatfser  = (*rootNode)(nil)
)

func (r *rootNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := r.v.allowed(ctx); errno != 0 {
		return errno
	}
	out.Mode = unix.S_IFDIR | 0o555
	out.Nlink = 2
	return 0
}

// Statfs of the top directory says nothing; a mount's says its size.
func (r *rootNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return r.v.allowed(ctx)
}

// Opendir checks the caller; the listing (one entry per mount, no fd
// held) is Readdir's.
func (r *rootNode) Opendir(ctx context.Context) syscall.Errno { return r.v.allowed(ctx) }

func (r *rootNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := r.v.allowed(ctx); errno != 0 {
		return nil, errno
	}
	i, err := strconv.Atoi(name)
	if err != nil || i < 0 || i >= len(r.v.srcs) || strconv.Itoa(i) != name {
		return nil, syscall.ENOENT
	}
	n := &node{v: r.v, hide: r.hide, m: i}
	if src := r.v.srcs[i]; src.Name != "" {
		// A file mount: its directory is the source's root.
		r.v.w.ensure(loc{i, parentRel}, int(src.Root.Fd()))
	} else {
		// A directory mount reports changes to itself: watched before
		// its attributes are read (see entry).
		r.v.w.ensure(loc{i, ""}, int(src.Root.Fd()))
	}
	return n.entry(ctx, &r.Inode, n, out)
}

func (r *rootNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	if errno := r.v.allowed(ctx); errno != 0 {
		return nil, errno
	}
	var list []fuse.DirEntry
	for i := range r.v.srcs {
		n := &node{v: r.v, hide: r.hide, m: i}
		h, errno := n.resolve()
		if errno != 0 {
			continue
		}
		list = append(list, fuse.DirEntry{Name: strconv.Itoa(i), Mode: h.Stat.Mode & unix.S_IFMT, Ino: h.Stat.Ino})
		h.Close()
	}
	return fs.NewListDirStream(list), 0
}

// node is a path in one mount. It holds no fd: every operation resolves
// the path again, so it means what the path means now.
type node struct {
	fs.Inode
	v    *View
	hide func(int, string) bool
	m    int
	rel  string // "" for the mount itself
	// dev and ino are the file the node was made for (its StableAttr):
	// see Open.
	dev, ino uint64
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
)

// full is the node's path beneath its source's root.
func (n *node) full() string {
	src := n.v.srcs[n.m]
	switch {
	case src.Name == "":
		return n.rel
	case n.rel == "":
		return src.Name
	}
	return src.Name + "/" + n.rel
}

// resolve opens the node's path now, without following any symlink, and
// refuses what the view never shows. Every failure is ENOENT: a hidden
// name and a missing one look the same.
func (n *node) resolve() (*securefs.Handle, syscall.Errno) {
	if n.rel != "" && n.hide != nil && n.hide(n.m, n.rel) {
		return nil, syscall.ENOENT
	}
	h, err := n.v.srcs[n.m].Root.ResolveNoFollow(n.full())
	if err != nil {
		if errors.Is(err, securefs.ErrNotExist) || errors.Is(err, securefs.ErrPathEscapes) || errors.Is(err, securefs.ErrInvalidPath) {
			return nil, syscall.ENOENT
		}
		return nil, syscall.EIO
	}
	if !shown(h.Kind) || (n.fileMount() && h.Kind != securefs.KindFile) {
		h.Close()
		return nil, syscall.ENOENT
	}
	return h, 0
}

// shown: a view has directories, regular files and symlinks. Sockets
// (a host service), FIFOs and devices do not exist in it.
func shown(kind api.Kind) bool {
	return kind == securefs.KindDir || kind == securefs.KindFile || kind == securefs.KindSymlink
}

// attr fills a with st as mount m presents it (see Options.Writable).
func (v *View) attr(m int, a *fuse.Attr, st *unix.Stat_t) {
	fillAttr(a, st)
	if m < len(v.rw) && v.rw[m] {
		a.Mode = writableMode(a.Mode)
	}
}

// writableMode is mode as a writable mount presents it: read and write
// for everyone, directories searchable and without the sticky bit (which
// would keep the container from deleting host users' files).
func writableMode(mode uint32) uint32 {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return (mode | 0o777) &^ unix.S_ISVTX
	case unix.S_IFREG:
		return mode | 0o666
	}
	return mode
}

func fillAttr(a *fuse.Attr, st *unix.Stat_t) {
	a.Ino = st.Ino
	a.Size = uint64(st.Size)
	a.Blocks = uint64(st.Blocks)
	a.Atime, a.Atimensec = uint64(st.Atim.Sec), uint32(st.Atim.Nsec)
	a.Mtime, a.Mtimensec = uint64(st.Mtim.Sec), uint32(st.Mtim.Nsec)
	a.Ctime, a.Ctimensec = uint64(st.Ctim.Sec), uint32(st.Ctim.Nsec)
	// No set-id bits: the view is nosuid anyway, and says so.
	a.Mode = st.Mode &^ (unix.S_ISUID | unix.S_ISGID)
	a.Nlink = uint32(st.Nlink)
	a.Uid, a.Gid = st.Uid, st.Gid
	a.Blksize = uint32(st.Blksize)
}

// parentLoc is the directory whose watch reports changes to n's name and
// attributes: its parent, or for a mount, the mount's own directory (a
// directory reports changes to itself) or a file mount's directory.
func (n *node) parentLoc() loc {
	switch i := strings.LastIndexByte(n.rel, '/'); {
	case i >= 0:
		return loc{n.m, n.rel[:i]}
	case n.rel != "":
		return loc{n.m, ""}
	case n.v.srcs[n.m].Name != "":
		return loc{n.m, parentRel}
	}
	return loc{n.m, ""}
}

// timeout is how long the kernel may cache n's name and attributes.
func (n *node) timeout() time.Duration {
	if n.v.w.watched(n.parentLoc()) {
		return n.v.long
	}
	return n.v.short
}

// watch makes sure n, a directory just resolved as h, is watched, and
// reports whether it is: then what the view says of its names and its
// listing may be cached long.
func (n *node) watch(h *securefs.Handle) bool {
	if h.Kind != securefs.KindDir {
		return false
	}
	return n.v.w.ensure(loc{n.m, n.rel}, int(h.File().Fd()))
}

// entry answers a lookup of n (already built, with its rel) under parent.
func (n *node) entry(ctx context.Context, parent *fs.Inode, child *node, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	// How long the answer may be kept is decided before the path is
	// resolved: only a watch that existed then reports every change
	// after what the answer says (one added meanwhile, by another
	// request, would not have reported a change in between).
	t := child.timeout()
	h, errno := child.resolve()
	if errno != 0 {
		return nil, errno
	}
	defer h.Close()
	at := child.dirAttrs(h, t)
	n.v.attr(child.m, &out.Attr, &h.Stat)
	child.dev, child.ino = uint64(h.Stat.Dev), h.Stat.Ino
	out.SetEntryTimeout(t)
	out.SetAttrTimeout(at)
	// A node is a path: the same inode at two paths is two nodes (Gen
	// tells them apart), so no operation ever runs on one path's behalf
	// through another path's node.
	hash := fnv.New64a()
	fmt.Fprintf(hash, "%d\x00%s", child.m, child.rel)
	id := fs.StableAttr{Mode: h.Stat.Mode & unix.S_IFMT, Ino: h.Stat.Ino, Gen: hash.Sum64()}
	if id.Ino <= 1 || id.Ino == ^uint64(0) {
		id.Ino = 1<<62 | id.Gen>>2
	}
	return parent.NewInode(ctx, child, id), 0
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.v.allowed(ctx); errno != 0 {
		return nil, errno
	}
	n.v.stats.lookups.Add(1)
	if name == "" || name == "." || name == ".." || len(name) > 255 {
		out.SetEntryTimeout(uncached)
		return nil, syscall.ENOENT
	}
	l := loc{n.m, n.rel}
	gen := n.v.w.gen.Load() // before watched is read (see watcher.missed)
	watched := n.v.w.watched(l)
	if !watched {
		// Watch this directory before anything of it is handed out, so
		// no change after this point goes unreported.
		if h, errno := n.resolve(); errno == 0 {
			watched = n.watch(h)
			h.Close()
		}
	}
	in, errno := n.entry(ctx, &n.Inode, &node{v: n.v, hide: n.hide, m: n.m, rel: join(n.rel, name)}, out)
	if errno == syscall.ENOENT && (!watched || !n.v.w.missed(l, name, gen)) {
		// Missing here, where a creation would go unreported (or an
		// overflow's reset could not drop the miss): answered as an
		// error, which the kernel does not keep (go-fuse caches a miss,
		// for NegativeTimeout, only when no timeout was set).
		out.SetEntryTimeout(uncached)
	}
	return in, errno
}

// uncached is the entry timeout that makes a miss an error reply the
// kernel does not cache.
const uncached = time.Nanosecond

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.v.allowed(ctx); errno != 0 {
		return errno
	}
	t := n.timeout() // before the attributes are read (see entry)
	if of, ok := f.(*file); ok {
		// fstat of an open file: the file that was opened, wherever
		// its path now leads.
		var st unix.Stat_t
		if err := unix.Fstat(of.fd, &st); err != nil {
			return fs.ToErrno(err)
		}
		n.v.attr(n.m, &out.Attr, &st)
		out.SetTimeout(t)
		return 0
	}
	h, errno := n.resolve()
	if errno != 0 {
		return errno
	}
	defer h.Close()
	t = n.dirAttrs(h, t)
	n.v.attr(n.m, &out.Attr, &h.Stat)
	out.SetTimeout(t)
	return 0
}

// dirAttrs returns how long the kernel may keep the attributes of n,
// just resolved as h, given t for its name. A directory's own attributes
// (mtime, ctime, nlink) change with every name made or removed inside it,
// which only its own watch reports (its parent's reports its name and its
// own chmod): left to its parent's, a directory looked up but never
// looked into kept its old mtime 10 minutes, Sync or not, and git's
// untracked cache, which trusts a directory's mtime, missed new files
// (review 8, TestReview8DirAttrsFreshAfterSync). So a directory is
// watched itself before its attributes are kept long, and they are read
// again once it is, so that no change between the two goes unreported.
func (n *node) dirAttrs(h *securefs.Handle, t time.Duration) time.Duration {
	if h.Kind != securefs.KindDir || t != n.v.long {
		return t
	}
	if !n.watch(h) {
		return n.v.short
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(h.File().Fd()), &st); err != nil {
		return n.v.short
	}
	h.Stat = st
	return t
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	if errno := n.v.allowed(ctx); errno != 0 {
		return nil, errno
	}
	if errno := n.searchable(ctx); errno != 0 {
		return nil, errno
	}
	h, errno := n.resolve()
	if errno != 0 {
		return nil, errno
	}
	defer h.Close()
	if h.Kind != securefs.KindSymlink {
		return nil, syscall.EINVAL
	}
	target, err := h.Readlink()
	if err != nil {
		return nil, syscall.EIO
	}
	return []byte(target), 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	if errno := n.v.allowed(ctx); errno != 0 {
		return errno
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(n.v.srcs[n.m].Root.Fd()), &st); err != nil {
		return fs.ToErrno(err)
	}
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, 0, 0
	out.Files, out.Ffree = st.Files, 0
	out.Bsize, out.Frsize = uint32(st.Bsize), uint32(st.Frsize)
	out.NameLen = uint32(st.Namelen)
	return 0
}

// OpendirHandle opens the node's directory now for its caller, who holds
// the fd (counted against its cap, see View.take) until Releasedir; the
// listing is read from it in chunks (see dir).
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	own, errno := n.v.caller(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	n.v.stats.opendirs.Add(1)
	if errno := n.searchable(ctx); errno != 0 {
		return nil, 0, errno
	}
	h, errno := n.resolve()
	if errno != 0 {
		return nil, 0, errno
	}
	defer h.Close()
	if h.Kind != securefs.KindDir {
		return nil, 0, syscall.ENOTDIR
	}
	if errno := permits(ctx, &h.Stat, 0); errno != 0 {
		return nil, 0, errno
	}
	if errno := n.v.take(own); errno != 0 {
		return nil, 0, errno
	}
	// The dir keeps the resolved fd and opens the directory from it only
	// if the kernel reads it (see dir).
	path, err := unix.FcntlInt(h.File().Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		give(own)
		return nil, 0, syscall.EMFILE
	}
	var keep uint32
	if n.watch(h) {
		// Changes to it are reported: the kernel may keep its listing
		// (see watch_linux.go).
		keep = fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
	}
	d := newDir(n, path, own, &h.Stat)
	n.v.track(d)
	return d, keep, 0
}

// reopen opens what h names for reading as a bare fd of ours (an
// *os.File would close it behind our back).
func reopen(h *securefs.Handle) (int, syscall.Errno) {
	f, err := h.Open()
	if err != nil {
		return -1, openErrno(err)
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return -1, syscall.EMFILE
	}
	return fd, 0
}

// openErrno is what a failed open of ours answers the kernel: EMFILE when
// sluiced is out of fds (the caller may retry), else EIO.
func openErrno(err error) syscall.Errno {
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		return syscall.EMFILE
	}
	return syscall.EIO
}

// Open opens the node's path now, for reading only (the view is read-only
// and so is every bind of it). It never answers ENOSYS: the kernel would
// take that as "no open support" and stop sending OPEN for the whole
// connection, every later open skipping these checks
// (TestReview8NoENOSYSFromOpen).
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(unix.O_WRONLY|unix.O_RDWR|unix.O_TRUNC|unix.O_APPEND|unix.O_CREAT) != 0 {
		return nil, 0, syscall.EROFS
	}
	own, errno := n.v.caller(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	if errno := n.searchable(ctx); errno != 0 {
		return nil, 0, errno
	}
	h, errno := n.resolve()
	if errno != 0 {
		return nil, 0, errno
	}
	defer h.Close()
	if h.Kind != securefs.KindFile {
		return nil, 0, syscall.ENOENT
	}
	// A FUSE inode takes one backing file for passthrough: while one
	// open of it is live, the kernel refuses an open of it without
	// passthrough, and go-fuse hands a new open that first open's
	// backing file. So an open must read the file its node was made for.
	// A file mount's node outlives every save (its entry is never
	// dropped: containers bind it): it is read through sluiced instead
	// (FOPEN_DIRECT_IO, no passthrough). Any other node whose path names
	// another file now (its entry cached a moment after a rename over
	// it) answers ESTALE: the kernel then looks the path up again
	// (LOOKUP_REVAL), finds the new file's node and opens that.
	if !n.fileMount() && (uint64(h.Stat.Dev) != n.dev || h.Stat.Ino != n.ino) {
		return nil, 0, syscall.ESTALE
	}
	if errno := permits(ctx, &h.Stat, flags); errno != 0 {
		return nil, 0, errno
	}
	if n.v.links && h.Stat.Nlink > 1 {
		return nil, 0, syscall.EACCES
	}
	if errno := n.v.take(own); errno != 0 {
		return nil, 0, errno
	}
	fd, errno := reopen(h)
	if errno != 0 {
		give(own)
		return nil, 0, errno
	}
	if n.v.links {
		// Checked again on the fd that is read: a link made since the
		// resolve counts.
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Nlink > 1 {
			unix.Close(fd)
			give(own)
			return nil, 0, syscall.EACCES
		}
	}
	f := &file{fd: fd, own: own, v: n.v}
	n.v.track(f)
	if n.fileMount() {
		return directFile{f}, fuse.FOPEN_DIRECT_IO, 0
	}
	return f, 0, 0
}

// fileMount reports whether n is a file mount's own node.
func (n *node) fileMount() bool { return n.rel == "" && n.v.srcs[n.m].Name != "" }

// directFile is a file read through sluiced (FOPEN_DIRECT_IO), never by
// passthrough: it has no PassthroughFd (see node.Open).
type directFile struct{ f *file }

var (
	_ fs.FileReader   = directFile{}
	_ fs.FileReleaser = directFile{}
	_ fs.FileLseeker  = directFile{}
	_ fs.FileFlusher  = directFile{}
)

func (d directFile) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return d.f.Read(ctx, dest, off)
}
func (d directFile) Release(ctx context.Context) syscall.Errno { return d.f.Release(ctx) }
func (d directFile) Flush(ctx context.Context) syscall.Errno   { return d.f.Flush(ctx) }
func (d directFile) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return d.f.Lseek(ctx, off, whence)
}

// releaser is an open handle of the view: a file or a directory.
type releaser interface{ release() }

func (v *View) track(r releaser) {
	v.hmu.Lock()
	if v.open == nil {
		v.open = map[releaser]struct{}{}
	}
	v.open[r] = struct{}{}
	v.hmu.Unlock()
}

func (v *View) untrack(r releaser) {
	v.hmu.Lock()
	delete(v.open, r)
	v.hmu.Unlock()
}

// releaseAll closes the handles the kernel never released; the server
// has stopped, so no request can use them any more.
func (v *View) releaseAll() {
	v.hmu.Lock()
	left := v.open
	v.open = nil
	v.hmu.Unlock()
	for r := range left {
		r.release()
	}
}

// file is an open regular file of the view.
type file struct {
	mu  sync.Mutex
	fd  int
	own *holder // whose cap it counts against (nil: root's)
	v   *View
}

var (
	_ fs.FileReader          = (*file)(nil)
	_ fs.FileReleaser        = (*file)(nil)
	_ fs.FilePassthroughFder = (*file)(nil)
	_ fs.FileLseeker         = (*file)(nil)
	_ fs.FileFlusher         = (*file)(nil)
)

// Flush answers ENOSYS: a read-only file has nothing to flush, and the
// kernel then stops sending FLUSH on every close (a round trip saved).
func (f *file) Flush(ctx context.Context) syscall.Errno { return syscall.ENOSYS }

func (f *file) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := unix.Pread(f.fd, dest, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// PassthroughFd hands the kernel the backing fd: reads and mmap then go
// to the file directly, not through this process.
func (f *file) PassthroughFd() (int, bool) { return f.fd, true }

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := unix.Seek(f.fd, int64(off), int(whence))
	return uint64(n), fs.ToErrno(err)
}

func (f *file) Release(ctx context.Context) syscall.Errno {
	f.v.untrack(f)
	f.release()
	return 0
}

func (f *file) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fd >= 0 {
		unix.Close(f.fd)
		f.fd = -1
		give(f.own)
	}
}
