package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"
)

// Sweep removes what a crashed daemon left in this run dir: containers
// still in libcontainer's state dir (their processes are killed and their
// cgroups removed), cgroups of this run dir with no state, and rootfs dirs.
// It returns how many leftovers it removed. The per-uid /etc dirs are a
// cache, not leftovers: NewRunner replaces an earlier run's, Close removes
// its own.
func (r *Runner) Sweep() (int, error) {
	n := 0
	var errs []error
	ents, _ := os.ReadDir(r.stateDir())
	for _, e := range ents {
		c, err := libcontainer.Load(r.stateDir(), e.Name())
		if err == nil {
			err = killAndDestroy(c)
		} else if errors.Is(err, libcontainer.ErrNotExist) {
			err = nil // caught mid-creation: no state.json; its cgroup is swept below
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("container %s: %w", e.Name(), err))
		}
		os.RemoveAll(filepath.Join(r.stateDir(), e.Name())) // libcontainer's own state files only
		n++
	}
	for _, dir := range r.cgroupDirs() {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				if err := killAndRemoveCgroup(filepath.Join(dir, e.Name())); err != nil {
					errs = append(errs, err)
				}
				n++
			}
		}
		os.Remove(dir)
	}
	// Premounts a crash left in our namespace, innermost first.
	for _, mp := range mountsUnder(r.rootfsDir()) {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	ents, _ = os.ReadDir(r.rootfsDir())
	for _, e := range ents {
		if err := removeTree(filepath.Join(r.rootfsDir(), e.Name())); err != nil {
			errs = append(errs, err)
		}
		n++
	}
	return n, errors.Join(errs...)
}

// CgroupLeftovers lists this run dir's sandbox cgroups that still exist
// (for tests and diagnostics).
func (r *Runner) CgroupLeftovers() []string {
	var out []string
	for _, dir := range r.cgroupDirs() {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	return out
}

// Dir is the runner's run dir.
func (r *Runner) Dir() string { return r.dir }

func killAndRemoveCgroup(dir string) error {
	for i := 0; i < 50; i++ {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		pids := strings.Fields(string(b))
		for _, p := range pids {
			var pid int
			fmt.Sscan(p, &pid)
			if pid > 0 {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("cgroup %s: still busy", dir)
}

// removeTree removes a rootfs dir without ever crossing into a mount: if
// a mount were left visible inside it (it never should be: containers
// mount in their own namespace), a plain RemoveAll would delete the
// mounted workspace. Every directory's mount ID is compared with the
// root's; a different one stops the removal with an error.
func removeTree(root string) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", root, err)
	}
	mnt, err := mountID(fd, "")
	if err != nil {
		unix.Close(fd)
		return err
	}
	err = removeChildren(fd, root, mnt)
	unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Rmdir(root); err != nil && err != unix.ENOENT {
		return fmt.Errorf("remove %s: %w", root, err)
	}
	return nil
}

func mountID(dirfd int, name string) (uint64, error) {
	var stx unix.Statx_t
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	if err := unix.Statx(dirfd, name, flags, unix.STATX_MNT_ID|unix.STATX_TYPE, &stx); err != nil {
		return 0, fmt.Errorf("statx %s: %w", name, err)
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return 0, fmt.Errorf("statx: kernel gives no mount id")
	}
	return stx.Mnt_id, nil
}

func removeChildren(dirfd int, path string, mnt uint64) error {
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	f := os.NewFile(uintptr(dup), path)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		child := filepath.Join(path, name)
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			id, err := mountID(dirfd, name)
			if err != nil {
				return err
			}
			if id != mnt {
				return fmt.Errorf("remove %s: a mount is visible there; not removing (unmount it first)", child)
			}
			cfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open %s: %w", child, err)
			}
			err = removeChildren(cfd, child, mnt)
			unix.Close(cfd)
			if err != nil {
				return err
			}
			if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
				return fmt.Errorf("remove %s: %w", child, err)
			}
			continue
		}
		if id, err := mountID(dirfd, name); err == nil && id != mnt {
			return fmt.Errorf("remove %s: a file mount is visible there; not removing", child)
		}
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && err != unix.ENOENT {
			return fmt.Errorf("remove %s: %w", child, err)
		}
	}
	return nil
}

// Close waits for background destroys and for closed views to stop, and
// removes this run dir's (now empty) cgroup scope directories and the
// per-uid /etc dirs (but those of boxes still alive).
func (r *Runner) Close() {
	r.Wait()
	if n, diags := r.waitViews(10 * time.Second); n > 0 {
		r.log.Warn("views still serving 10 s after their containers were destroyed", "count", n, "views", diags)
	}
	if r.ids != nil {
		if err := r.removeEtcDirs(r.ids.held); err != nil {
			r.log.Warn("remove per-uid /etc dirs", "err", err)
		}
	}
	for _, dir := range r.cgroupDirs() {
		os.Remove(dir)
	}
	if r.ownsRootfsMount {
		unix.Unmount(r.rootfsDir(), unix.MNT_DETACH)
		r.ownsRootfsMount = false
	}
	if ents, err := os.ReadDir(r.stateDir()); r.ownsStateMount && err == nil && len(ents) == 0 {
		unix.Unmount(r.stateDir(), unix.MNT_DETACH)
		r.ownsStateMount = false
	}
	if r.init != nil {
		r.init.Close()
		r.init = nil
	}
	r.closeIdmaps()
}

// killAndDestroy kills a loaded container's processes, waits until it has
// stopped (it is not our child, so there is no Wait) and destroys it.
func killAndDestroy(c *libcontainer.Container) error {
	c.Signal(unix.SIGKILL)
	for i := 0; i < 250; i++ {
		st, err := c.Status()
		if err != nil || st == libcontainer.Stopped {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c.Destroy()
}

// Leftovers lists what containers of the run dir dir left behind, read
// from the kernel rather than from any bookkeeping: cgroups under its
// scope in every hierarchy, mounts under its rootfs area, live processes
// in its cgroups, and rootfs dirs. Tests assert it is empty after a daemon
// stops. Cgroups are looked for in the layout the calling process is in
// (a test in a delegating service's daemon leaf finds the delegated
// subtree). The per-uid /etc dirs are not listed: a cache, not a
// container's. Zombies are not counted: they run nothing, and after a daemon is
// killed they are reaped by PID 1 (systemd does; some test sandboxes'
// PID 1 never reaps).
func Leftovers(dir string) []string {
	return LeftoversIn(dir, currentLayout())
}

// LeftoversIn is Leftovers with the cgroups looked for in layout l: a
// test outside the service (an e2e suite driving a systemd-managed
// sluiced) names the service's layout, CgroupLayout{Service: "/system.slice/sluiced.service"}.
func LeftoversIn(dir string, l CgroupLayout) []string {
	r := &Runner{dir: dir, scope: scopeOf(dir), cgroups: l}
	var out []string
	out = append(out, r.CgroupLeftovers()...)
	for _, m := range mountsUnder(r.rootfsDir()) {
		out = append(out, "mount "+m)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if strings.Contains(string(b), r.cgroups.parent()+"/"+r.scope+"/") && !isZombie(e.Name()) {
			out = append(out, "process "+e.Name())
		}
	}
	rootfs, _ := os.ReadDir(r.rootfsDir())
	for _, e := range rootfs {
		out = append(out, "rootfs "+e.Name())
	}
	return out
}

func isZombie(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return true // gone
	}
	// the state follows the parenthesised command, which may hold spaces
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// Containers counts the containers of the run dir dir that exist now,
// pooled and running, by their rootfs dirs (for tests and diagnostics; a
// view's dir there is not a container).
func Containers(dir string) int {
	r := &Runner{dir: dir}
	ents, _ := os.ReadDir(r.rootfsDir())
	n := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "s") {
			n++
		}
	}
	return n
}
