package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// ScratchSpec makes some of a Spec's directory mounts writable: each
// box gets one scratch layer, a tmpfs of its own that no path names,
// and each mount whose Dest is listed here is an overlay of the view's
// entry (read-only, the lower layer) and a directory of that tmpfs (the
// upper layer, where every write lands). The host's files are never
// written. After the command, Box.TakeScratch hands the layer over
// (package changeset reads it).
//
// The view the mounts come from should present them writable
// (ViewMount.Writable): the container's uid owns nothing on the host.
type ScratchSpec struct {
	Dests []string // Dest values of Spec.Mounts (directory mounts)
	// MaxBytes caps the layer's size (0: DefaultScratchBytes), MaxFiles
	// its files and directories (0: DefaultScratchFiles). Beyond them a
	// write fails inside with ENOSPC.
	MaxBytes, MaxFiles int64
}

// Defaults of ScratchSpec.
const (
	DefaultScratchBytes = 256 << 20
	DefaultScratchFiles = 1 << 16
)

// Scratch is a box's scratch layer, handed over by Box.TakeScratch: the
// upper directory of each writable mount, in the order of
// ScratchSpec.Dests. Close frees it.
type Scratch struct {
	Layers []Layer
	mnt    *os.File // the tmpfs's root (a detached mount)
}

// Layer is one writable mount's upper layer: what the command created,
// changed (copied up whole) and deleted (whiteouts) beneath Dest.
type Layer struct {
	Dest  string
	Upper *os.File // O_PATH|O_DIRECTORY fd of upper/<i>
}

// Close frees the layer: closing the last fd of a detached mount frees
// the mount and its tmpfs.
func (s *Scratch) Close() error {
	if s == nil {
		return nil
	}
	var errs []error
	for _, l := range s.Layers {
		if l.Upper != nil {
			errs = append(errs, l.Upper.Close())
		}
	}
	s.Layers = nil
	if s.mnt != nil {
		errs = append(errs, s.mnt.Close())
		s.mnt = nil
	}
	return errors.Join(errs...)
}

// checkScratch reports whether every Dest of ss is one of spec's mounts,
// each named once.
func checkScratch(spec *Spec) error {
	ss := spec.Scratch
	if ss == nil {
		return nil
	}
	if len(ss.Dests) == 0 {
		return errors.New("scratch: no writable mounts")
	}
	for i, d := range ss.Dests {
		if slices.Contains(ss.Dests[:i], d) {
			return fmt.Errorf("scratch: %s listed twice", d)
		}
		if !slices.ContainsFunc(spec.Mounts, func(m Mount) bool { return m.Dest == d }) {
			return fmt.Errorf("scratch: %s is not one of the spec's mounts", d)
		}
	}
	if ss.MaxBytes < 0 || ss.MaxFiles < 0 {
		return errors.New("scratch: negative limit")
	}
	return nil
}

// newTmpfs makes a detached tmpfs (fsopen, fsmount: never attached to
// any path), nosuid and nodev, and returns the fd of its root.
func newTmpfs(bytes, inodes int64, mode uint32) (*os.File, error) {
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen tmpfs: %w", err)
	}
	// The context holds the superblock: closed in any case once the
	// mount is made (or not).
	defer unix.Close(fsfd)
	for _, kv := range [][2]string{
		{"size", strconv.FormatInt(bytes, 10)},
		{"nr_inodes", strconv.FormatInt(inodes, 10)},
		{"mode", strconv.FormatUint(uint64(mode), 8)},
	} {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("tmpfs %s=%s: %w", kv[0], kv[1], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, fmt.Errorf("create tmpfs: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("fsmount tmpfs: %w", err)
	}
	return os.NewFile(uintptr(mfd), "tmpfs"), nil
}

// newScratch makes the box's scratch tmpfs with upper/<i> and work/<i>
// for each of the n writable mounts.
func newScratch(ss *ScratchSpec) (*Scratch, error) {
	size, files := ss.MaxBytes, ss.MaxFiles
	if size <= 0 {
		size = DefaultScratchBytes
	}
	if files <= 0 {
		files = DefaultScratchFiles
	}
	n := len(ss.Dests)
	// Our own directories (upper, work, and per mount upper/<i>,
	// work/<i>, and the overlay's work/<i>/work) are not the command's.
	mnt, err := newTmpfs(size, files+int64(3+3*n), 0o700)
	if err != nil {
		return nil, err
	}
	s := &Scratch{mnt: mnt}
	root := int(mnt.Fd())
	for _, d := range []string{"upper", "work"} {
		if err := unix.Mkdirat(root, d, 0o700); err != nil {
			s.Close()
			return nil, fmt.Errorf("scratch: mkdir %s: %w", d, err)
		}
	}
	for i, dest := range ss.Dests {
		for _, d := range []string{"upper", "work"} {
			if err := unix.Mkdirat(root, d+"/"+strconv.Itoa(i), 0o700); err != nil {
				s.Close()
				return nil, fmt.Errorf("scratch: mkdir %s/%d: %w", d, i, err)
			}
		}
		fd, err := openBeneathPath(root, "upper/"+strconv.Itoa(i), unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("scratch: open upper/%d: %w", i, err)
		}
		s.Layers = append(s.Layers, Layer{Dest: dest, Upper: os.NewFile(uintptr(fd), "upper/"+strconv.Itoa(i))})
	}
	runtime.KeepAlive(mnt)
	return s, nil
}

// openBeneathPath opens rel (several components) beneath dirfd,
// following no symlink and crossing no mount.
func openBeneathPath(dirfd int, rel string, flags int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	for range 16 {
		fd, err := unix.Openat2(dirfd, rel, &how)
		if err != unix.EAGAIN && err != unix.EINTR {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// bindOverlay attaches, at m.Dest beneath the rootfs fd, an overlay of
// m's view entry (the lower layer) and upper/<i>, work/<i> of the
// scratch tmpfs, instead of the read-only bind. Every layer is given to
// the kernel as an fd (FSCONFIG_SET_FD), none by path. The upper root
// gets the mode and owner the view presents for the entry, so the
// merged root looks like the view's.
//
// The layers are given as fds (lowerdir+, upperdir, workdir with
// FSCONFIG_SET_FD, Linux 6.8 and later); a kernel that does not take them
// (Debian 12's 6.1) gets each as the /proc/self/fd path of the same fd,
// which overlayfs resolves when the superblock is made, in this process:
// either way no path a workspace controls is named.
func bindOverlay(rfd int, m Mount, s *Scratch, i int, attachAt string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(m.File.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, errors.New("a writable mount must be a directory")
	}
	root := int(s.mnt.Fd())
	name := strconv.Itoa(i)
	// fsconfig takes no O_PATH fd: open each layer for reading.
	lower, err := unix.Openat(int(m.File.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	runtime.KeepAlive(m.File)
	if err != nil {
		return nil, fmt.Errorf("open lower: %w", err)
	}
	defer unix.Close(lower)
	upper, err := openBeneathPath(root, "upper/"+name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("open upper: %w", err)
	}
	defer unix.Close(upper)
	work, err := openBeneathPath(root, "work/"+name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("open work: %w", err)
	}
	defer unix.Close(work)
	runtime.KeepAlive(s.mnt)
	if err := unix.Fchmod(upper, st.Mode&0o7777); err != nil {
		return nil, fmt.Errorf("chmod upper: %w", err)
	}
	if err := unix.Fchown(upper, int(st.Uid), int(st.Gid)); err != nil {
		return nil, fmt.Errorf("chown upper: %w", err)
	}
	ov, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen overlay: %w", err)
	}
	// The context holds the superblock and, through it, the view's
	// connection: it must not outlive the mount.
	defer unix.Close(ov)
	for _, kv := range [][2]string{{"redirect_dir", "off"}, {"index", "off"}, {"metacopy", "off"}, {"xino", "auto"}} {
		if err := unix.FsconfigSetString(ov, kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("overlay %s=%s: %w", kv[0], kv[1], err)
		}
	}
	legacy, err := setLayers(ov, lower, upper, work)
	if err != nil {
		return nil, err
	}
	if legacy {
		// Such a kernel also clones the upper layer's mount only from
		// the caller's mount namespace: the scratch tmpfs is attached,
		// for the overlay's making only, at a directory of the runner's
		// own (root-only, outside every rootfs), and detached again.
		detach, err := attachFor(s.mnt, attachAt)
		if err != nil {
			return nil, err
		}
		err = unix.FsconfigCreate(ov)
		detach()
		if err != nil {
			return nil, fmt.Errorf("create overlay: %w", err)
		}
	} else if err := unix.FsconfigCreate(ov); err != nil {
		return nil, fmt.Errorf("create overlay: %w", err)
	}
	tree, err := unix.Fsmount(ov, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("fsmount overlay: %w", err)
	}
	return attach(rfd, tree, m.Dest, true)
}

// TakeScratch hands over the box's scratch layer once its command has
// ended (ExecHeld returned: every process of the box is dead, so nothing
// writes to it any more); Release then leaves it alone and the caller
// closes it. Nil when the box's Spec has no Scratch, or it was taken.
func (b *Box) TakeScratch() *Scratch {
	b.scratchMu.Lock()
	defer b.scratchMu.Unlock()
	s := b.scratch
	b.scratch = nil
	return s
}

// dropScratch frees a scratch layer nobody took.
func (b *Box) dropScratch() {
	if s := b.TakeScratch(); s != nil {
		s.Close()
	}
}

// testLegacyLayers, set by tests only, gives the layers as
// /proc/self/fd paths, as on a kernel without fd-valued layer options.
var testLegacyLayers bool

// setLayers gives an overlay context its lower, upper and work dirs;
// legacy says they went as paths (see testLegacyLayers).
func setLayers(ov, lower, upper, work int) (legacy bool, _ error) {
	if !testLegacyLayers {
		err := unix.FsconfigSetFd(ov, "lowerdir+", lower)
		if err == nil {
			if err = unix.FsconfigSetFd(ov, "upperdir", upper); err == nil {
				err = unix.FsconfigSetFd(ov, "workdir", work)
			}
			if err != nil {
				return false, fmt.Errorf("overlay layers: %w", err)
			}
			return false, nil
		}
		// An unknown key (EINVAL), or one that takes no fd (6.1:
		// EOPNOTSUPP).
		if err != unix.EINVAL && err != unix.EOPNOTSUPP {
			return false, fmt.Errorf("overlay lowerdir+: %w", err)
		}
	}
	for _, l := range []struct {
		key string
		fd  int
	}{{"lowerdir", lower}, {"upperdir", upper}, {"workdir", work}} {
		if err := unix.FsconfigSetString(ov, l.key, "/proc/self/fd/"+strconv.Itoa(l.fd)); err != nil {
			return true, fmt.Errorf("overlay %s: %w", l.key, err)
		}
	}
	return true, nil
}

// attachFor attaches the detached mount mnt at dir (made, mode 0700, if
// missing) and returns what detaches it again (lazily: the fds held on it
// keep it alive) and removes dir.
func attachFor(mnt *os.File, dir string) (detach func(), err error) {
	if err := unix.Mkdir(dir, 0o700); err != nil && err != unix.EEXIST {
		return nil, fmt.Errorf("scratch attach point: %w", err)
	}
	err = unix.MoveMount(int(mnt.Fd()), "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH)
	runtime.KeepAlive(mnt)
	if err != nil {
		unix.Rmdir(dir)
		return nil, fmt.Errorf("attach the scratch layer: %w", err)
	}
	return func() {
		unix.Unmount(dir, unix.MNT_DETACH)
		unix.Rmdir(dir)
	}, nil
}
