package sandbox

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Reserved are the container paths sluice mounts itself; a tool's mount
// may not lie under them (it would be hidden, or hide what sluice needs).
var Reserved = []string{"/usr", "/etc", "/proc", "/dev", "/.sluice", "/bin", "/sbin", "/lib", "/lib64"}

// CheckDest reports whether dest may be a tool mount's path inside the
// container.
func CheckDest(dest string) error {
	if !filepath.IsAbs(dest) || filepath.Clean(dest) != dest || dest == "/" {
		return fmt.Errorf("mount path %q must be absolute, clean and not /", dest)
	}
	for _, r := range Reserved {
		if dest == r || strings.HasPrefix(dest, r+"/") {
			return fmt.Errorf("mount path %q lies under %s, which sluice mounts itself", dest, r)
		}
	}
	return nil
}

// premount makes, in the daemon's own mount namespace and inside the
// container's rootfs dir, the /tmp tmpfs and a read-only bind of each tool
// mount. The kernel refuses to bind a mount from another mount namespace,
// which is why this is done here and not in the container's init;
// libcontainer's recursive bind of the rootfs then copies these mounts,
// flags and all, into the container.
//
// Nothing here follows a path: each target is created and opened one
// component at a time beneath the rootfs dir's fd, refusing symlinks
// (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), and each bind is a
// detached clone of the source fd (open_tree) made read-only before it is
// attached (mount_setattr) and moved onto the target fd (move_mount). The
// sources are the tool's view entries (package fsview), never the
// workspace itself, so nothing sluiced mounts ever sits on a host file.
// It returns the mounts made, as fds of their roots, for unmountAll.
//
// A mount that spec.Scratch names is an overlay of the view's entry and
// a directory of the box's scratch tmpfs (bindOverlay) instead: the
// scratch layer is made here and returned (freed on error). Each of
// opt.Caches is bound read-write at its Dest (bindCache).
func (r *Runner) premount(rootfs string, spec *Spec, opt CreateOptions, uid uint32) (made []*os.File, sc *Scratch, retErr error) {
	if err := checkScratch(spec); err != nil {
		return nil, nil, err
	}
	if err := checkCaches(spec, opt.Caches); err != nil {
		return nil, nil, err
	}
	if spec.Scratch != nil {
		var err error
		if sc, err = newScratch(spec.Scratch); err != nil {
			return nil, nil, err
		}
		defer func() {
			if retErr != nil {
				sc.Close()
				sc = nil
			}
		}()
	}
	made, err := r.premountAll(rootfs, spec, opt, sc, uid)
	return made, sc, err
}

func (r *Runner) premountAll(rootfs string, spec *Spec, opt CreateOptions, sc *Scratch, uid uint32) ([]*os.File, error) {
	var made []*os.File
	rfd, err := unix.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return made, fmt.Errorf("open rootfs: %w", err)
	}
	defer unix.Close(rfd)
	size := spec.Limits.TmpBytes
	if size <= 0 {
		size = defaultTmpBytes
	}
	tmp, err := makeTarget(rfd, "/tmp", true)
	if err != nil {
		return made, fmt.Errorf("mount /tmp: %w", err)
	}
	err = unix.Mount("tmpfs", procFd(tmp), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		"mode=1777,size="+strconv.FormatInt(size, 10))
	unix.Close(tmp)
	if err != nil {
		return made, fmt.Errorf("mount /tmp: %w", err)
	}
	// The tmpfs now covers the target: reopen it to name the new mount.
	top, err := openBeneath(rfd, "tmp", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return made, fmt.Errorf("mount /tmp: %w", err)
	}
	made = append(made, os.NewFile(uintptr(top), "/tmp"))
	for _, m := range spec.Mounts {
		if err := CheckDest(m.Dest); err != nil {
			return made, err
		}
		var mf *os.File
		var err error
		if i := scratchIndex(spec, m.Dest); i >= 0 {
			mf, err = bindOverlay(rfd, m, sc, i, rootfs+".scratch")
		} else {
			mf, err = bindReadOnly(rfd, m)
		}
		if mf != nil {
			made = append(made, mf)
		}
		if err != nil {
			return made, fmt.Errorf("bind %s: %w", m.Dest, err)
		}
	}
	for _, c := range opt.Caches {
		mf, err := r.bindCache(rfd, c, uid)
		if mf != nil {
			made = append(made, mf)
		}
		if err != nil {
			return made, fmt.Errorf("cache %s: %w", c.Dest, err)
		}
	}
	return made, nil
}

// scratchIndex is dest's index in spec.Scratch.Dests, or -1.
func scratchIndex(spec *Spec, dest string) int {
	if spec.Scratch == nil {
		return -1
	}
	for i, d := range spec.Scratch.Dests {
		if d == dest {
			return i
		}
	}
	return -1
}

// bindReadOnly clones m.File's mount (a view entry) and attaches it,
// read-only, nosuid, nodev, at m.Dest beneath the rootfs fd.
func bindReadOnly(rfd int, m Mount) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(m.File.Fd()), &st); err != nil {
		return nil, err
	}
	tree, err := unix.OpenTree(int(m.File.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	runtime.KeepAlive(m.File)
	if err != nil {
		return nil, fmt.Errorf("open_tree: %w", err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(tree)
		return nil, fmt.Errorf("mount_setattr: %w", err)
	}
	return attach(rfd, tree, m.Dest, st.Mode&unix.S_IFMT == unix.S_IFDIR)
}

// attach moves the detached mount tree onto dest, made beneath the rootfs
// fd (makeTarget: a directory when dir), and returns the tree fd, which
// names the attached mount's root after the move; on an error the tree is
// closed (a detached mount goes with its last fd).
func attach(rfd, tree int, dest string, dir bool) (*os.File, error) {
	target, err := makeTarget(rfd, dest, dir)
	if err != nil {
		unix.Close(tree)
		return nil, err
	}
	err = unix.MoveMount(tree, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
	unix.Close(target)
	if err != nil {
		unix.Close(tree)
		return nil, fmt.Errorf("move_mount: %w", err)
	}
	return os.NewFile(uintptr(tree), dest), nil
}

// makeTarget creates dest (absolute, clean) beneath the rootfs fd, one
// component at a time, and returns an O_PATH fd of it: a directory, or an
// empty regular file when dir is false. No component may be a symlink,
// and nothing is reached through an earlier mount's contents (overlapping
// mounts are refused at load; RESOLVE_NO_SYMLINKS is the backstop): a
// workspace cannot make root create or truncate anything.
func makeTarget(rfd int, dest string, dir bool) (int, error) {
	parts := strings.Split(strings.TrimPrefix(dest, "/"), "/")
	at := rfd
	closeAt := func() {
		if at != rfd {
			unix.Close(at)
		}
	}
	for i, name := range parts {
		last := i == len(parts)-1
		if name == "" || name == "." || name == ".." {
			closeAt()
			return -1, fmt.Errorf("mount path %q: bad component", dest)
		}
		if !last || dir {
			if err := unix.Mkdirat(at, name, 0o755); err != nil && err != unix.EEXIST {
				closeAt()
				return -1, fmt.Errorf("mkdir %s: %w", name, err)
			}
			fd, err := openBeneath(at, name, unix.O_PATH|unix.O_DIRECTORY)
			closeAt()
			if err != nil {
				return -1, fmt.Errorf("open %s: %w", name, err)
			}
			at = fd
			continue
		}
		fd, err := unix.Openat(at, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		} else if err != unix.EEXIST {
			closeAt()
			return -1, fmt.Errorf("create %s: %w", name, err)
		}
		fd, err = openBeneath(at, name, unix.O_PATH)
		closeAt()
		if err != nil {
			return -1, fmt.Errorf("open %s: %w", name, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			return -1, fmt.Errorf("mount target %s is not a regular file", dest)
		}
		return fd, nil
	}
	return at, nil
}

// openBeneath opens one name beneath dirfd, following no symlink.
func openBeneath(dirfd int, name string, flags int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for range 16 {
		fd, err := unix.Openat2(dirfd, name, &how)
		if err != unix.EAGAIN && err != unix.EINTR {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

func procFd(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// unmountAll detaches the daemon's copies of a container's premounts,
// innermost first, by the fds of their roots (never by path), and closes
// the fds.
func unmountAll(mounts []*os.File) {
	for i := len(mounts) - 1; i >= 0; i-- {
		unix.Unmount(procFd(int(mounts[i].Fd())), unix.MNT_DETACH)
		mounts[i].Close()
	}
}

// runTmpfs is the tmpfs the rootfs area and libcontainer's state dir
// get: they hold only empty directories, symlinks, mount points, a fifo
// and a small JSON file per container (state.json: 3.5 KB, tens of KB
// when libcontainer compiles a profile itself; the size is a cap, memory
// is used only for what is there). On a disk filesystem each of the
// ~20 inodes a container creates there and removes again is a journaled
// inode allocation (on this project's ext4 test host, mkdir alone was
// ~8 ms of CPU per container: docs/performance.md).
const runTmpfs = "mode=700,size=64m,nr_inodes=1048576"

// privatize makes dir a mount of its own with private propagation, so that
// premounts under it never propagate to the host's other namespaces: a
// tmpfs (runTmpfs) when dir is not a mount point yet. It reports whether
// it mounted dir (and so should unmount it on Close). A dir found
// mounted (a crashed run's tmpfs, or an older version's bind) is kept.
func privatize(dir string) (bool, error) {
	mine := false
	isMount, err := isMountPoint(dir)
	if err != nil {
		return false, err
	}
	if !isMount {
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, runTmpfs); err != nil {
			return false, fmt.Errorf("mount tmpfs at %s: %w", dir, err)
		}
		mine = true
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return mine, fmt.Errorf("make %s private: %w", dir, err)
	}
	return mine, nil
}

func isMountPoint(dir string) (bool, error) {
	a, err := mountIDOf(dir)
	if err != nil {
		return false, err
	}
	b, err := mountIDOf(filepath.Dir(dir))
	if err != nil {
		return false, err
	}
	return a != b, nil
}

func mountIDOf(path string) (uint64, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx); err != nil {
		return 0, fmt.Errorf("statx %s: %w", path, err)
	}
	return stx.Mnt_id, nil
}

// mountsUnder lists mount points strictly below dir in this process's
// mount namespace, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := UnescapeMountinfo(fields[4])
		if strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// UnescapeMountinfo undoes /proc/self/mountinfo's \ooo escapes (space,
// tab, newline, backslash) in a path field.
func UnescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MountsUnderRunDir lists mounts still visible under the run dir's rootfs
// area (for tests: there must be none between calls).
func (r *Runner) MountsUnderRunDir() []string { return mountsUnder(r.rootfsDir()) }
