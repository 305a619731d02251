package fsview

import (
	"context"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Who may use a view, and how many fds they may pin in sluiced.
//
// A view is mounted allow_other (containers run as uids of their own),
// so the kernel lets every local user send it requests: a user who could
// not even reach sluiced's socket could read a workspace through a view
// mounted in the run dir (security review, class 4). The view therefore
// answers a request only when its caller's uid is one it admitted (the
// uid of a live container of its tool; see Admit) or 0. Root is let in
// because it is the daemon itself (it opens the view's entries to bind
// them) and because root in the init user namespace can read the backing
// files directly anyway; root of a user namespace reaches FUSE as the
// host uid it maps to, never as 0. Everyone else gets EACCES on every
// operation: lookup, getattr, open, opendir, readlink, statfs (xattrs
// are disabled for all: DisableXAttrs answers ENOSYS before any node).
//
// Each open file or directory of a view is an fd of sluiced's, held until
// the container closes it: without a bound, one container opening files
// in a loop took sluiced to its fd limit and the daemon's own calls
// failed with EMFILE (class 3). So each admitted uid holds at most
// MaxOpen handles, and all views of the process together at most the
// budget: the soft RLIMIT_NOFILE less a reserve kept for everything else
// the daemon opens (connections, the ledger, file-tool calls, container
// pipes), so sluiced keeps serving while containers sit at their caps.

// holder counts one admitted uid's open handles.
type holder struct{ open atomic.Int64 }

// Admit lets uid use the view (a container of its tool is about to run
// as uid). Call Revoke once nothing runs as uid any more.
func (v *View) Admit(uid uint32) {
	v.mu.Lock()
	if v.uids[uid] == nil {
		v.uids[uid] = &holder{}
	}
	v.mu.Unlock()
}

// Revoke ends uid's use of the view: from now on its requests get
// EACCES. Handles it still has open stay counted until released.
func (v *View) Revoke(uid uint32) {
	v.mu.Lock()
	delete(v.uids, uid)
	v.mu.Unlock()
}

// Admitted reports whether uid may use the view now.
func (v *View) Admitted(uid uint32) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.uids[uid] != nil
}

// caller checks who sent the request: root (nil holder: no per-caller
// cap) or an admitted uid (its holder); anyone else is refused.
func (v *View) caller(ctx context.Context) (*holder, syscall.Errno) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return nil, syscall.EACCES // fail closed: no caller, no answer
	}
	if c.Uid == 0 {
		return nil, 0
	}
	v.mu.RLock()
	h := v.uids[c.Uid]
	v.mu.RUnlock()
	if h == nil {
		return nil, syscall.EACCES
	}
	return h, 0
}

// allowed is caller for operations that hold nothing open.
func (v *View) allowed(ctx context.Context) syscall.Errno {
	_, errno := v.caller(ctx)
	return errno
}

// fmodeExec is the open flag the kernel sets for execve's open of the
// program (__FMODE_EXEC, include/linux/fs.h): it needs the execute bit,
// not the read bit.
const fmodeExec = 0x20

// permits checks an open by the request's caller against the mode of
// what it opens now (st, just resolved): read, or execute for execve.
// The kernel checks the same (default_permissions), but against the
// attributes it caches, for up to the cache timeout in a watched
// directory: a chmod through a hard link outside the view is reported to
// no watch, and one in the view is acted on only when its event has been
// read. The fresh mode decides (TestBreachStaleModeOpens). Like the
// kernel under default_permissions, only the mode bits count; a
// container has no supplementary groups. Root is not checked.
func permits(ctx context.Context, st *unix.Stat_t, flags uint32) syscall.Errno {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return syscall.EACCES
	}
	if c.Uid == 0 {
		return 0
	}
	bit := uint32(4) // read
	if flags&fmodeExec != 0 {
		bit = 1 // execute
	}
	return modeAllows(c, st, bit)
}

// modeAllows checks bit (4 read, 1 execute or search) of st's mode for
// the caller c, as the kernel does: owner, else group, else others.
func modeAllows(c *fuse.Caller, st *unix.Stat_t, bit uint32) syscall.Errno {
	switch {
	case st.Uid == c.Uid:
		bit <<= 6
	case st.Gid == c.Gid:
		bit <<= 3
	}
	if st.Mode&bit == 0 {
		return syscall.EACCES
	}
	return 0
}

// searchable checks that the request's caller may search every
// directory on the way to n now: the mount's own directory and each one
// beneath it down to n's parent. The kernel checks the same at each step
// of a path walk (default_permissions), but against the modes it caches:
// a directory the host made 0700 still let another uid reach what is
// beneath it while the chmod's event waited in the queue, and for up to
// the short timeout in a directory the view could not watch, which Sync
// does not shorten (review 8, TestReview8StaleDirModeOpens). Open,
// opendir and readlink (everything that yields content) ask this first.
// A mount's own node is reached by no walk beneath it, and a file mount
// is bound as a file.
// Root is not checked.
func (n *node) searchable(ctx context.Context) syscall.Errno {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return syscall.EACCES
	}
	if c.Uid == 0 || n.rel == "" || n.v.srcs[n.m].Name != "" {
		return 0
	}
	root := int(n.v.srcs[n.m].Root.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(root, &st); err != nil {
		return syscall.EIO
	}
	if errno := modeAllows(c, &st, 1); errno != 0 {
		return errno
	}
	for i := 0; i < len(n.rel); i++ {
		if n.rel[i] != '/' {
			continue
		}
		// Each component was checked not to be a symlink (or is now
		// found one, and refused) before the next is walked through.
		if err := unix.Fstatat(root, n.rel[:i], &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return syscall.ENOENT
		}
		if errno := modeAllows(c, &st, 1); errno != 0 {
			return errno
		}
	}
	return 0
}

// take counts one more open handle for h (nil: root), or refuses with
// EMFILE when h is at the view's cap or the process at its budget.
func (v *View) take(h *holder) syscall.Errno {
	if held.Add(1) > budget.Load() {
		held.Add(-1)
		return syscall.EMFILE
	}
	if h != nil && h.open.Add(1) > v.max {
		h.open.Add(-1)
		held.Add(-1)
		return syscall.EMFILE
	}
	return 0
}

// give undoes take.
func give(h *holder) {
	held.Add(-1)
	if h != nil {
		h.open.Add(-1)
	}
}

var (
	// held is how many fds all views of this process hold for open
	// files and directories.
	held atomic.Int64
	// budget is how many they may hold: see setBudget.
	budget atomic.Int64
)

// Reserve is how many of limit fds (the soft RLIMIT_NOFILE) views leave to
// the rest of the daemon: a quarter, at least 256 and at most 16384.
func Reserve(limit uint64) uint64 {
	return min(max(limit/4, 256), 16384)
}

// Budget is how many fds all views of this process may hold open
// together: the soft RLIMIT_NOFILE (as of the last Mount) less Reserve.
func Budget() int64 { return budget.Load() }

// Held is how many fds views of this process hold open now.
func Held() int64 { return held.Load() }

// setBudget computes the budget from the soft NOFILE limit now (sluiced
// raises it to the hard limit before any view is mounted).
func setBudget() {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		lim.Cur = 1024
	}
	b := int64(0)
	if r := Reserve(lim.Cur); lim.Cur > r {
		b = int64(lim.Cur - r)
	}
	budget.Store(b)
}
