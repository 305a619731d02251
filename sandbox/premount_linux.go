package sandbox

import (
	"bufio"
	"errors"
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
// mount. The bind's source is the O_PATH fd the daemon resolved beneath
// base, reached through /proc/self/fd: nothing is looked up again by
// path, so a symlink swapped in after the check cannot redirect the mount
// (CVE-2021-30465). The kernel refuses to bind a mount from another mount
// namespace, which is why this is done here and not in the container's
// init; libcontainer's recursive bind of the rootfs then copies these
// mounts, flags and all, into the container. It returns the mount points
// made, outermost first, for unmountAll.
func (r *Runner) premount(rootfs string, spec *Spec) ([]string, error) {
	var made []string
	tmp := filepath.Join(rootfs, "tmp")
	size := spec.Limits.TmpBytes
	if size <= 0 {
		size = defaultTmpBytes
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return made, err
	}
	if err := unix.Mount("tmpfs", tmp, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		"mode=1777,size="+strconv.FormatInt(size, 10)); err != nil {
		return made, fmt.Errorf("mount /tmp: %w", err)
	}
	made = append(made, tmp)
	for _, m := range spec.Mounts {
		if err := CheckDest(m.Dest); err != nil {
			return made, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(m.File.Fd()), &st); err != nil {
			return made, fmt.Errorf("mount %s: %w", m.Dest, err)
		}
		target := filepath.Join(rootfs, m.Dest)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return made, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := os.Mkdir(target, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return made, err
			}
		} else if err := os.WriteFile(target, nil, 0o644); err != nil {
			return made, err
		}
		src := "/proc/self/fd/" + strconv.Itoa(int(m.File.Fd()))
		err := unix.Mount(src, target, "", unix.MS_BIND, "")
		runtime.KeepAlive(m.File)
		if err != nil {
			return made, fmt.Errorf("bind %s: %w", m.Dest, err)
		}
		made = append(made, target)
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return made, fmt.Errorf("make %s read-only: %w", m.Dest, err)
		}
		if spec.Hide != nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			masked, err := r.maskHidden(m.File, target, spec.Hide)
			made = append(made, masked...)
			if err != nil {
				return made, fmt.Errorf("mask never-listed paths in %s: %w", m.Dest, err)
			}
		}
	}
	return made, nil
}

// maxMaskWalk bounds the walk of one mounted tree. A larger tree fails
// the container: a secret that could not be looked for is not exposed.
const maxMaskWalk = 100_000

// maskHidden walks the tree mounted at target through its source fd (never
// following a symlink; a symlink to a hidden file reaches the mask inside
// the container) and mounts over every path hide selects: an empty
// read-only file over files, an empty read-only tmpfs over directories.
func (r *Runner) maskHidden(src *os.File, target string, hide func(string) bool) ([]string, error) {
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(int(src.Fd())), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	runtime.KeepAlive(src)
	if err != nil {
		return nil, err
	}
	var made []string
	seen := 0
	var walk func(dirfd int, rel string) error
	walk = func(dirfd int, rel string) error {
		defer unix.Close(dirfd)
		dup, err := unix.Dup(dirfd)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(dup), rel)
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return err
		}
		sort.Strings(names)
		for _, name := range names {
			if seen++; seen > maxMaskWalk {
				return fmt.Errorf("more than %d entries; mount a smaller directory", maxMaskWalk)
			}
			child := name
			if rel != "" {
				child = rel + "/" + name
			}
			var st unix.Stat_t
			if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue
			}
			isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
			if hide(child) {
				where := filepath.Join(target, child)
				var merr error
				if isDir {
					merr = unix.Mount("tmpfs", where, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=555")
				} else if st.Mode&unix.S_IFMT != unix.S_IFLNK {
					merr = unix.Mount(r.empty, where, "", unix.MS_BIND, "")
					if merr == nil {
						made = append(made, where)
						merr = unix.Mount("", where, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
						if merr != nil {
							return fmt.Errorf("mask %s: %w", child, merr)
						}
						continue
					}
				} else {
					continue // a symlink: what it leads to is masked where it lies
				}
				if merr != nil {
					return fmt.Errorf("mask %s: %w", child, merr)
				}
				made = append(made, where)
				continue
			}
			if isDir {
				cfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					continue
				}
				if err := walk(cfd, child); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return made, walk(fd, "")
}

// unmountAll detaches mount points, innermost first.
func unmountAll(points []string) {
	for i := len(points) - 1; i >= 0; i-- {
		unix.Unmount(points[i], unix.MNT_DETACH)
	}
}

// privatize makes dir a mount of its own with private propagation, so that
// premounts under it never propagate to the host's other namespaces. It
// reports whether it mounted dir (and so should unmount it on Close).
func privatize(dir string) (bool, error) {
	mine := false
	isMount, err := isMountPoint(dir)
	if err != nil {
		return false, err
	}
	if !isMount {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return false, fmt.Errorf("bind %s: %w", dir, err)
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
		mp := unescapeMountinfo(fields[4])
		if strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func unescapeMountinfo(s string) string {
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
