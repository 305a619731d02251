package fsview

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// Keeping the kernel's caches of a view fresh (docs/design.md, "The view").
//
// A walk of a tree through a view costs what a walk through a bind costs
// only when the kernel answers it from its own caches: names and
// attributes (entry and attribute timeouts) and directory listings
// (FOPEN_CACHE_DIR with FOPEN_KEEP_CACHE). What the caches may hold for
// long is decided by what sluice learns of host changes: every directory
// whose names, attributes or listing the view hands to the kernel is
// watched with inotify first, and each host change under it is turned
// into the matching invalidation (a name: FUSE_NOTIFY_INVAL_ENTRY, which
// also drops everything cached beneath it; attributes and a listing:
// FUSE_NOTIFY_INVAL_INODE). A directory's own attributes change with the
// names made inside it, which only its own watch reports: they are kept
// long only once it is watched itself (node.dirAttrs). A directory that
// cannot be watched (the inotify watch limit, the budget, or a file
// system others change unseen: changedElsewhere) is served as before: a
// 1 s timeout and no listing cache, for it and everything beneath it.
//
// Why a cache cannot show what the view would now refuse:
//   - Hiding is a pure function of a node's path (never globs); a node is a
//     path. A cached name or listing was decided for that path and would be
//     decided the same now.
//   - Everything that yields content (open, opendir, readlink) reaches the
//     server, which resolves the node's path again with openat2 beneath the
//     mount's root fd, refuses symlinks on the way, hidden names and
//     sockets, FIFOs and devices, and acts on the fd it got: a rename over a
//     file, a directory renamed to a never name, a new *.pem at depth 5
//     are decided afresh at the open whatever the cache held. Open and
//     opendir also check the caller (View.caller) every time.
//   - So a stale cache entry is stale metadata of an allowed path at worst
//     (a size, a mode, a name that is gone), and the watch bounds even that
//     to the time an event takes to arrive; Sync closes that gap for every
//     change made before a command starts.
//
// The invalidation of a listing cannot be lost to a race with a readdir
// that is filling it: the kernel starts a listing cache from the
// directory's mtime, and at every rewind compares it with a fresh one
// once the attributes were invalidated (the view runs with
// AUTO_INVAL_DATA), so a listing read before a change and cached after its
// invalidation is dropped at the next opendir. A name invalidation waits
// in the kernel for a lookup in flight in that directory (it takes the
// directory's lock), so it cannot be overtaken by the reply it must undo.
//
// A miss kept long (a negative dentry) belongs to no node: a creation's
// event drops it by name, but after an overflow the names are lost, and
// a mount's own directory is never invalidated itself (containers bind
// it). So every miss kept long is recorded (watcher.missed) and the
// overflow's reset drops each by name; a lookup that began before a reset
// is answered uncached.

// watchMask is what a watched directory reports: names that come and go,
// and attribute or content changes of the directory and of what is in it.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_MODIFY | unix.IN_CLOSE_WRITE |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// entryEvents change which names a directory holds.
const entryEvents = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO

// loc is a directory of a view: rel in mount m ("" is the mount's root).
// For a file mount, the directory that holds the file is loc{m, parentRel}.
type loc struct {
	m   int
	rel string
}

// inotifyInit and addWatch are the syscalls (seams for the tests of
// running out).
var (
	inotifyInit = unix.InotifyInit1
	addWatch    = unix.InotifyAddWatch
)

// The watch budget. Watches count against fs.inotify.max_user_watches,
// a limit per user that sluiced (root) shares with every other process
// of root on the host: systemd, udev, file watchers. A command walking a
// big tree makes the view watch every directory it lists, and without a
// bound took them all, so that the host's own watches failed (ENOSPC)
// until the view was remade. All views of the process together hold at
// most half of the limit; beyond it a directory is served unwatched, as
// one the limit refused (TestWatchBudget).
var (
	watchesHeld atomic.Int64
	watchBudget atomic.Int64
)

// setWatchBudget reads the limit now (each Mount).
func setWatchBudget() {
	limit := int64(8192) // the kernel's old default
	if b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_watches"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
			limit = n
		}
	}
	watchBudget.Store(limit / 2)
}

// parentRel names the directory a file mount's file lives in; no path of
// a view is "/".
const parentRel = "/"

// watcher keeps one view's kernel caches fresh (see above).
type watcher struct {
	v   *View
	fd  int                                    // inotify, non-blocking
	add func(int, string, uint32) (int, error) // addWatch when made

	// mu serializes reading and acting on events: the loop and Sync.
	mu  sync.Mutex
	buf []byte

	// wmu guards the maps; it is never held while the kernel is told
	// anything (a FUSE notification may wait for a request of ours).
	wmu   sync.RWMutex
	byLoc map[loc]int32
	byWd  map[int32]map[loc]struct{}

	// gen counts the overflow resets: a lookup that began before one
	// may not leave a miss cached long (see missed).
	gen atomic.Uint64

	// misses are the names the kernel may keep as missing for long (a
	// negative dentry), by directory, until their deadline; an overflow
	// drops them (see tell). nmu is never held while wmu is taken.
	nmu       sync.Mutex
	misses    map[loc]map[string]time.Time
	nmisses   int
	nextSweep time.Time

	stop    [2]int // a pipe: closing stop[1] ends the loop
	done    chan struct{}
	started bool // the loop runs (start); close waits for it only then
}

// newWatcher makes v's watcher. Without an inotify instance (the
// per-user instance limit) it watches nothing: every directory is then
// served uncached, as one the watch limit refused.
func newWatcher(v *View) *watcher {
	w := &watcher{v: v, fd: -1, add: addWatch, byLoc: map[loc]int32{}, byWd: map[int32]map[loc]struct{}{}, done: make(chan struct{})}
	fd, err := inotifyInit(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return w
	}
	if err := unix.Pipe2(w.stop[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		unix.Close(fd)
		return w
	}
	w.fd, w.buf = fd, make([]byte, 64<<10)
	return w
}

func (w *watcher) start() {
	if w.fd >= 0 {
		w.started = true
		go w.loop()
	}
}

// close ends the loop and releases the inotify instance. Called once:
// when the server has stopped, or when the mount failed (the loop never
// started: waiting for it hung Mount for good). The fd is marked closed
// under both locks: its number may be handed to anything sluiced opens
// next (a connection, a container's pipe), which a late Sync must not
// read as events (TestReview8SyncAfterCloseReadsNothing).
func (w *watcher) close() {
	if w.fd < 0 {
		return
	}
	unix.Close(w.stop[1])
	if w.started {
		<-w.done
	}
	unix.Close(w.stop[0])
	w.mu.Lock()
	w.wmu.Lock()
	unix.Close(w.fd) // every watch goes with it
	w.fd = -1
	watchesHeld.Add(-int64(len(w.byWd)))
	clear(w.byWd)
	clear(w.byLoc)
	w.wmu.Unlock()
	w.mu.Unlock()
}

func (w *watcher) loop() {
	defer close(w.done)
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}, {Fd: int32(w.stop[0]), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents != 0 {
			w.drain()
		}
	}
}

// Sync acts on every host change reported so far: when it returns, the
// kernel holds nothing cached from before a change that finished before
// Sync was called (inotify queues an event before the changing syscall
// returns). A command started after Sync sees those changes.
func (w *watcher) Sync() { w.drain() }

// drain reads and acts on the events queued when it is called, and no
// more: a host that changes files without pause cannot keep it (or Sync
// behind it) going for ever.
func (w *watcher) drain() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return // none, or closed
	}
	queued, err := unix.IoctlGetInt(w.fd, unix.TIOCINQ) // FIONREAD
	if err != nil {
		queued = len(w.buf)
	}
	for queued > 0 {
		n, err := unix.Read(w.fd, w.buf)
		if err != nil || n <= 0 {
			return // EAGAIN: nothing more queued
		}
		w.act(w.buf[:n])
		queued -= n
	}
}

// change is one thing to tell the kernel.
type change struct {
	l     loc
	name  string
	mask  uint32
	reset bool // queue overflowed: everything known is stale
}

// act turns a buffer of inotify events into invalidations.
func (w *watcher) act(buf []byte) {
	var todo []change
	w.wmu.Lock()
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		if off+unix.SizeofInotifyEvent+int(ev.Len) > len(buf) {
			break // not an event the kernel wrote: never index past the read
		}
		name := ""
		if ev.Len > 0 {
			raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			if i := strings.IndexByte(string(raw), 0); i >= 0 {
				raw = raw[:i]
			}
			name = string(raw)
		}
		off += unix.SizeofInotifyEvent + int(ev.Len)
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			// Events were lost: no watch can be trusted to name the
			// directory it was added for. Start again from nothing.
			for wd := range w.byWd {
				unix.InotifyRmWatch(w.fd, uint32(wd))
			}
			watchesHeld.Add(-int64(len(w.byWd)))
			clear(w.byWd)
			clear(w.byLoc)
			w.gen.Add(1)
			todo = append(todo[:0], change{reset: true})
			continue
		}
		locs := w.byWd[ev.Wd]
		if ev.Mask&unix.IN_IGNORED != 0 {
			// The kernel dropped the watch (the directory is gone).
			for l := range locs {
				delete(w.byLoc, l)
			}
			if locs != nil {
				watchesHeld.Add(-1)
			}
			delete(w.byWd, ev.Wd)
			continue
		}
		for l := range locs {
			todo = append(todo, change{l: l, name: name, mask: ev.Mask})
			if name != "" && ev.Mask&entryEvents != 0 && l.rel != parentRel {
				// What was watched beneath this name is another
				// directory now, or none: forget it, so that the next
				// lookup watches what is there then.
				w.forgetLocked(loc{l.m, join(l.rel, name)})
			}
		}
	}
	w.wmu.Unlock()
	for _, c := range todo {
		w.tell(c)
	}
}

// forgetLocked unwatches l and every watched directory beneath it. wmu is
// held.
func (w *watcher) forgetLocked(l loc) {
	if _, ok := w.byLoc[l]; !ok {
		return // nothing beneath an unwatched directory is watched
	}
	prefix := l.rel + "/"
	for k, wd := range w.byLoc {
		if k.m == l.m && (k == l || l.rel == "" || strings.HasPrefix(k.rel, prefix)) {
			delete(w.byLoc, k)
			set := w.byWd[wd]
			delete(set, k)
			if len(set) == 0 {
				delete(w.byWd, wd)
				watchesHeld.Add(-1)
				unix.InotifyRmWatch(w.fd, uint32(wd))
			}
		}
	}
}

// tell invalidates in the kernel what one change made stale.
func (w *watcher) tell(c change) {
	root := w.v.root
	if c.reset {
		// The misses first: no node holds them, and the kernel keeps a
		// miss in a mount's own directory, which is never invalidated
		// itself, for the negative timeout (TestOverflowDropsEveryMiss).
		w.nmu.Lock()
		misses := w.misses
		w.misses, w.nmisses = nil, 0
		w.nmu.Unlock()
		for l, names := range misses {
			mnt := root.GetChild(strconv.Itoa(l.m))
			if mnt == nil {
				continue
			}
			if dir := walk(mnt, l.rel); dir != nil {
				for name := range names {
					dir.NotifyEntry(name)
				}
			}
		}
		// The view's own top entries stay: containers bind them, and
		// a bind of an invalidated dentry fails.
		for _, mnt := range root.Children() {
			invalidateAll(mnt)
		}
		return
	}
	mnt := root.GetChild(strconv.Itoa(c.l.m))
	if mnt == nil {
		return // the kernel holds nothing of this mount
	}
	if c.l.rel == parentRel {
		// A file mount: only its own name matters.
		// Its attributes are dropped, never its name: containers bind
		// the view's top entries, and a bind of an invalidated dentry
		// fails. The node is a path, so the next open (and getattr)
		// resolves whatever file is there now.
		if c.name == w.v.srcs[c.l.m].Name {
			mnt.NotifyContent(0, 0)
		}
		return
	}
	dir := walk(mnt, c.l.rel)
	if dir == nil {
		return
	}
	switch {
	case c.name == "":
		// The directory itself: its attributes.
		if c.mask&(unix.IN_ATTRIB|unix.IN_MODIFY) != 0 {
			dir.NotifyContent(0, 0)
		}
	case c.mask&entryEvents != 0:
		// A name came or went: drop it (and all cached beneath it), the
		// directory's listing and its attributes (mtime, nlink). The
		// node that was at the name keeps living where a process holds
		// it (a cwd, an open directory): its attributes and listing go
		// too, so that an opendir through it lists what its path names
		// now, not what was cached of the directory that left
		// (TestReview8CwdInReplacedDirListsPath). Taken before the name
		// is dropped, which a new lookup may then fill with another node.
		old := dir.GetChild(c.name)
		w.unmiss(c.l, c.name)
		dir.NotifyEntry(c.name)
		dir.NotifyContent(0, 0)
		if old != nil {
			old.NotifyContent(0, 0)
		}
	default:
		if child := dir.GetChild(c.name); child != nil {
			child.NotifyContent(0, 0)
		}
	}
}

// maxMisses bounds the misses one view remembers (see missed).
const maxMisses = 1 << 14

// missed records that name was just found missing in the directory l,
// looked up while l was watched and the reset count was gen, and reports
// whether the kernel may keep the miss for the long timeout. Inotify
// reports a creation, but after an overflow nothing reports what was
// lost, and no node holds a miss: the reset drops every miss recorded
// here. A lookup that began before a reset, or one beyond the bound, is
// answered uncached.
func (w *watcher) missed(l loc, name string, gen uint64) bool {
	now := time.Now()
	w.nmu.Lock()
	defer w.nmu.Unlock()
	if w.gen.Load() != gen {
		return false
	}
	if w.nmisses >= maxMisses && now.After(w.nextSweep) {
		w.sweepLocked(now)
	}
	if w.nmisses >= maxMisses {
		return false
	}
	if w.misses == nil {
		w.misses = map[loc]map[string]time.Time{}
	}
	names := w.misses[l]
	if names == nil {
		names = map[string]time.Time{}
		w.misses[l] = names
	}
	if _, ok := names[name]; !ok {
		w.nmisses++
	}
	names[name] = now.Add(w.v.long)
	return true
}

// sweepLocked forgets the misses the kernel no longer keeps, and when
// to look again. nmu is held.
func (w *watcher) sweepLocked(now time.Time) {
	next := now.Add(w.v.long)
	for l, names := range w.misses {
		for name, dl := range names {
			switch {
			case now.After(dl):
				delete(names, name)
				w.nmisses--
			case dl.Before(next):
				next = dl
			}
		}
		if len(names) == 0 {
			delete(w.misses, l)
		}
	}
	w.nextSweep = next
}

// unmiss forgets a miss the kernel is told to drop.
func (w *watcher) unmiss(l loc, name string) {
	w.nmu.Lock()
	if names := w.misses[l]; names != nil {
		if _, ok := names[name]; ok {
			delete(names, name)
			w.nmisses--
		}
	}
	w.nmu.Unlock()
}

// invalidateAll drops every name, attribute and listing the kernel holds
// beneath n.
func invalidateAll(n *fs.Inode) {
	for name, child := range n.Children() {
		invalidateAll(child)
		n.NotifyEntry(name)
	}
	n.NotifyContent(0, 0)
}

// walk finds the inode the kernel knows at rel beneath mnt, or nil.
func walk(mnt *fs.Inode, rel string) *fs.Inode {
	n := mnt
	for rel != "" && n != nil {
		name, rest, _ := strings.Cut(rel, "/")
		n, rel = n.GetChild(name), rest
	}
	return n
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// watched reports whether changes in the directory l are reported.
func (w *watcher) watched(l loc) bool {
	w.wmu.RLock()
	_, ok := w.byLoc[l]
	w.wmu.RUnlock()
	return ok
}

// ensure watches the directory l, which fd (just resolved) is, unless it
// is watched already; it reports whether it is watched now. A directory
// is watched only beneath a watched one, so that forgetting a directory
// forgets all watched beneath it.
func (w *watcher) ensure(l loc, fd int) bool {
	if w.watched(l) {
		return true
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if _, ok := w.byLoc[l]; ok {
		return true
	}
	if l.rel != "" && l.rel != parentRel {
		// Checked under wmu: a parent forgotten (renamed) between an
		// unlocked check and this point would leave l watched beneath
		// an unwatched directory, where forgetting the parent's name
		// later no longer reaches it (forgetLocked stops at an
		// unwatched directory).
		parent := ""
		if i := strings.LastIndexByte(l.rel, '/'); i >= 0 {
			parent = l.rel[:i]
		}
		if _, ok := w.byLoc[loc{l.m, parent}]; !ok {
			return false
		}
	}
	if w.fd < 0 || watchesHeld.Load() >= watchBudget.Load() || changedElsewhere(fd) {
		return false
	}
	// The watch is on the inode the fd holds: no path is looked up again
	// (the magic link is followed to the fd's own inode).
	// A failure (ENOSPC: the watch limit) leaves l unwatched, served
	// uncached; the next lookup in it tries again.
	wd, err := w.add(w.fd, "/proc/self/fd/"+strconv.Itoa(fd), watchMask)
	if err != nil {
		return false
	}
	if !w.names(l, fd) {
		// The path was renamed away after fd was resolved, and the
		// rename's event may have been read before this watch existed
		// to be forgotten: the watch would be on a directory the path
		// no longer names, and the one it names would go unreported
		// (TestWatchesNameTheirDirectory). A rename after this check
		// is an event that forgets the watch (wmu is held until it is
		// recorded).
		if len(w.byWd[int32(wd)]) == 0 {
			unix.InotifyRmWatch(w.fd, uint32(wd))
		}
		return false
	}
	w.byLoc[l] = int32(wd)
	set := w.byWd[int32(wd)]
	if set == nil {
		set = map[loc]struct{}{}
		w.byWd[int32(wd)] = set
		watchesHeld.Add(1)
	}
	set[l] = struct{}{}
	return true
}

// changedElsewhere reports whether the directory fd is on a file system
// that others change without this kernel seeing it: a network or cluster
// file system, or a FUSE one (virtiofs, the usual share of a development
// VM, or sshfs). inotify reports only changes made through this kernel,
// so the operator's save on the VM's host or another client raised no
// event and the kernel kept a stale listing and stale attributes for the
// 10 minute timeout, Sync or not (review 8,
// TestReview8RemoteChangesNotCachedLong). Such a directory is served as
// an unwatched one. An fs type that cannot be read counts as one.
func changedElsewhere(fd int) bool {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return true
	}
	switch uint32(st.Type) {
	case unix.NFS_SUPER_MAGIC, unix.SMB_SUPER_MAGIC, unix.SMB2_SUPER_MAGIC, unix.CIFS_SUPER_MAGIC,
		unix.FUSE_SUPER_MAGIC, unix.V9FS_MAGIC, unix.CEPH_SUPER_MAGIC, unix.AFS_SUPER_MAGIC,
		unix.AFS_FS_MAGIC, unix.CODA_SUPER_MAGIC, unix.OCFS2_SUPER_MAGIC,
		0x01161970, // GFS2
		0x0bd00bd0: // Lustre
		return true
	}
	return false
}

// names reports whether the directory l's path names now is fd's. A
// mount's own directory (and a file mount's) is its root fd, which no
// rename moves.
func (w *watcher) names(l loc, fd int) bool {
	if l.rel == "" || l.rel == parentRel {
		return true
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false
	}
	h, err := w.v.srcs[l.m].Root.ResolveNoFollow(l.rel)
	if err != nil {
		return false
	}
	defer h.Close()
	return h.Stat.Dev == st.Dev && h.Stat.Ino == st.Ino
}

// Watches reports how many directories of the view are watched.
func (v *View) Watches() int {
	v.w.wmu.RLock()
	defer v.w.wmu.RUnlock()
	return len(v.w.byLoc)
}

// Sync makes every host change finished before the call visible through
// the view (see watcher.Sync).
func (v *View) Sync() { v.w.Sync() }
