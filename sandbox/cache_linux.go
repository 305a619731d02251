package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Cache is a persistent writable directory for a tool's containers (a
// build or package cache): a detached tmpfs, capped at its size, that no
// host path names. Bind it into a box with CreateOptions.Caches; what one
// box writes there the next box given the same *Cache finds. Nothing in
// a cache is ever part of a changeset.
//
// Each box runs as a uid of its own, so a file one box made would belong
// to a uid the next box does not have. A cache is therefore bound through
// an idmapped mount (mount_setattr MOUNT_ATTR_IDMAP): every file of the
// tmpfs is stored as uid and gid 0 and shows, in the box, as the box's
// own uid and gid (and the box's files are stored as 0). The box owns
// the whole cache, whoever wrote it; no other id can be stored there
// (chown to another id fails with EOVERFLOW inside), and the tmpfs is
// nosuid, nodev, reached by no path.
type Cache struct {
	mu  sync.Mutex
	mnt *os.File // root of the detached tmpfs; nil once closed
}

// NewCache makes an empty cache of at most maxBytes (and maxBytes/4096
// files, at least 1024).
func NewCache(maxBytes int64) (*Cache, error) {
	if maxBytes <= 0 {
		return nil, errors.New("cache: size must be positive")
	}
	mnt, err := newTmpfs(maxBytes, max(maxBytes/4096, 1024), 0o755)
	if err != nil {
		return nil, err
	}
	return &Cache{mnt: mnt}, nil
}

// Close frees the cache once no box binds it any more (a box's bind
// holds the tmpfs until the box is destroyed).
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mnt == nil {
		return nil
	}
	err := c.mnt.Close()
	c.mnt = nil
	return err
}

// CacheBind is one cache bound read-write at Dest in a box: an absolute,
// clean container path, not under Reserved, neither at, inside nor
// around one of the Spec's mounts or another cache. It may lie under
// /tmp (the box's home: ~/.cache is /tmp/.cache), whose fresh tmpfs the
// directories are then made in.
type CacheBind struct {
	Dest  string
	Cache *Cache
}

// checkCaches refuses a cache bind whose Dest is bad or overlaps a mount
// of spec or another cache: a cache inside a writable mount would be
// made in its scratch layer, one inside a read-only mount cannot be.
func checkCaches(spec *Spec, caches []CacheBind) error {
	overlaps := func(a, b string) bool {
		return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
	}
	for i, c := range caches {
		if c.Cache == nil {
			return fmt.Errorf("cache %s: no cache", c.Dest)
		}
		if err := CheckDest(c.Dest); err != nil {
			return err
		}
		if c.Dest == "/tmp" {
			return errors.New("cache may not be /tmp itself")
		}
		for _, m := range spec.Mounts {
			if overlaps(c.Dest, m.Dest) {
				return fmt.Errorf("cache %s overlaps mount %s", c.Dest, m.Dest)
			}
		}
		for _, o := range caches[:i] {
			if overlaps(c.Dest, o.Dest) {
				return fmt.Errorf("cache %s overlaps cache %s", c.Dest, o.Dest)
			}
		}
	}
	return nil
}

// bindCache attaches an idmapped clone of c's tmpfs (stored id 0 shown as
// uid) at c.Dest beneath the rootfs fd, nosuid and nodev.
func (r *Runner) bindCache(rfd int, c CacheBind, uid uint32) (*os.File, error) {
	userns, err := r.idmapFor(uid)
	if err != nil {
		return nil, err
	}
	c.Cache.mu.Lock()
	if c.Cache.mnt == nil {
		c.Cache.mu.Unlock()
		return nil, errors.New("cache closed")
	}
	tree, err := unix.OpenTree(int(c.Cache.mnt.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	c.Cache.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("open_tree: %w", err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(userns.Fd())}
	err = unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr)
	runtime.KeepAlive(userns)
	if err != nil {
		unix.Close(tree)
		if err == unix.EINVAL {
			return nil, fmt.Errorf("mount_setattr idmap: %w (a cache is an idmapped tmpfs, which needs Linux 6.3 or later)", err)
		}
		return nil, fmt.Errorf("mount_setattr idmap: %w", err)
	}
	return attach(rfd, tree, c.Dest, true)
}

// idmapFor returns a user namespace that maps id 0 to uid (and gid 0 to
// the gid of the same number), for a cache's idmapped bind. It is made
// once per uid, by a short-lived child (the helper, which reads an empty
// stdin and exits) cloned into a new user namespace, and kept until
// Close.
func (r *Runner) idmapFor(uid uint32) (*os.File, error) {
	r.idmapMu.Lock()
	defer r.idmapMu.Unlock()
	if f := r.idmaps[uid]; f != nil {
		return f, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	cmd := exec.Command(r.helper)
	cmd.Stdin = pr
	cmd.Env = []string{}
	cmd.Dir = "/"
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(uid), Size: 1}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: m, GidMappings: m,
		GidMappingsEnableSetgroups: false, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("cache: user namespace for uid %d: %w", uid, err)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	pw.Close() // the helper reads an empty argv and exits
	cmd.Wait()
	if err != nil {
		return nil, fmt.Errorf("cache: user namespace for uid %d: %w", uid, err)
	}
	if r.idmaps == nil {
		r.idmaps = map[uint32]*os.File{}
	}
	r.idmaps[uid] = ns
	return ns, nil
}

// closeIdmaps closes the user namespaces idmapFor kept.
func (r *Runner) closeIdmaps() {
	r.idmapMu.Lock()
	defer r.idmapMu.Unlock()
	for uid, f := range r.idmaps {
		f.Close()
		delete(r.idmaps, uid)
	}
}

// CheckCaches reports whether this kernel can bind a cache as boxes get
// it: an idmapped clone of a tmpfs (Linux 6.3 and later). A manifest
// whose tools have caches is refused at load when it cannot.
func (r *Runner) CheckCaches() error {
	c, err := NewCache(1 << 20)
	if err != nil {
		return err
	}
	defer c.Close()
	userns, err := r.idmapFor(r.ids.rng.First)
	if err != nil {
		return err
	}
	tree, err := unix.OpenTree(int(c.mnt.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns.Fd())}
	err = unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr)
	runtime.KeepAlive(userns)
	if err != nil {
		return fmt.Errorf("an idmapped tmpfs: %w (caches need Linux 6.3 or later)", err)
	}
	return nil
}
