//go:build linux

// Package policyfiles reads the files a policy is loaded from (the
// manifest and the seccomp profiles its tools name) and refuses a policy
// one of whose files a write or delete root can reach.
package policyfiles

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/sandbox"
)

// A policy must stay out of the agent's reach: a write or delete tool
// whose root could replace the manifest, or a seccomp profile it names,
// rewrites the policy at the next reload (docs/manifest.md, "Where the
// manifest lives"; docs/security.md, "The third review"). The check is
// made against the kernel's identities, not by comparing path strings:
// each policy file is opened by a walk that records every directory a
// lookup of its path consulted (following symlinks itself), and each such
// directory's ancestors are collected by device and inode through "..",
// in every mount that shows the directory (reach). A writable
// root whose fd has one of those identities — the file's directory, an
// ancestor of it, a directory a symlink on the way lies in, the same
// directory reached through a symlink or a bind mount — can replace a
// name the file is reached through, and the load is refused.

// devIno is a file's identity.
type devIno struct{ dev, ino uint64 }

func statID(fd int) (devIno, unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return devIno{}, st, err
	}
	return devIno{uint64(st.Dev), st.Ino}, st, nil
}

// policyFile is one file a policy was read from.
type policyFile struct {
	key  string // what names it: "manifest", "tools.run.seccomp"
	path string // as the kernel names the file it read
	// dirs holds every directory a lookup of the path consulted, and
	// their ancestors: a root among them could replace the file.
	dirs map[devIno]bool
	// secret: a credential's value file (secret.go), which no root may
	// reach, to read it either; id is the file's own identity.
	secret bool
	id     devIno
}

// Files are the files a policy load read: the manifest and the seccomp
// profiles its tools name (parsed once each).
type Files struct {
	files []*policyFile
	// Seccomp holds the profiles parsed, by the manifest's seccomp value.
	Seccomp map[string]*sandbox.Profile
}

// New returns an empty set, for one policy load.
func New() *Files {
	return &Files{Seccomp: map[string]*sandbox.Profile{}}
}

// maxPolicySymlinks bounds the symlinks one policy path may pass (the
// kernel's own limit).
const maxPolicySymlinks = 40

// Read opens name (absolute) by a walk that records each directory it
// looks a name up in, and returns the regular file's contents, read from
// what was opened. key names the file in errors.
func (pf *Files) Read(key, name string) ([]byte, error) {
	if !filepath.IsAbs(name) {
		return nil, fmt.Errorf("%s: %q is not absolute", key, name)
	}
	f, consulted, err := openWalk(name, nil)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	defer func() {
		for _, d := range consulted {
			unix.Close(d)
		}
	}()
	p := &policyFile{key: key, path: name, dirs: map[devIno]bool{}}
	if kp, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd())); err == nil {
		p.path = kp
	}
	r := newReach(p.dirs)
	for _, d := range consulted {
		if err := r.add(d); err != nil {
			return nil, fmt.Errorf("%s: where it lies: %w", name, err)
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, authz.MaxManifestBytes+1))
	runtime.KeepAlive(f)
	if err != nil {
		return nil, err
	}
	if len(data) > authz.MaxManifestBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, authz.MaxManifestBytes)
	}
	pf.files = append(pf.files, p)
	return data, nil
}

// openWalk opens the regular file name names, component by component
// from "/", following symlinks itself (at most maxPolicySymlinks), and
// returns it with an O_PATH fd of every directory it looked a name up
// in. The caller closes them. check, when set, is asked about each
// component as it is met ("/", every directory, every symlink followed,
// the file): the walk fails with its error.
func openWalk(name string, check func(st *unix.Stat_t) error) (f *os.File, consulted []int, err error) {
	fail := func(err error) (*os.File, []int, error) {
		for _, d := range consulted {
			unix.Close(d)
		}
		return nil, nil, err
	}
	const dirFlags = unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC
	dir, err := unix.Open("/", dirFlags, 0)
	if err != nil {
		return fail(fmt.Errorf("open /: %w", err))
	}
	consulted = append(consulted, dir)
	if check != nil {
		var st unix.Stat_t
		if err := unix.Fstat(dir, &st); err != nil {
			return fail(err)
		}
		if err := check(&st); err != nil {
			return fail(fmt.Errorf("/: %w", err))
		}
	}
	rest := strings.Split(name, "/")
	links := 0
	for len(rest) > 0 {
		comp := rest[0]
		rest = rest[1:]
		if comp == "" || comp == "." {
			continue
		}
		fd, err := unix.Openat(dir, comp, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(&os.PathError{Op: "open", Path: name, Err: err})
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return fail(err)
		}
		if check != nil {
			if err := check(&st); err != nil {
				unix.Close(fd)
				return fail(fmt.Errorf("%s: %w", comp, err))
			}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := readlinkFd(fd)
			unix.Close(fd)
			if err != nil {
				return fail(&os.PathError{Op: "readlink", Path: name, Err: err})
			}
			if links++; links > maxPolicySymlinks {
				return fail(&os.PathError{Op: "open", Path: name, Err: unix.ELOOP})
			}
			rest = append(strings.Split(target, "/"), rest...)
			if strings.HasPrefix(target, "/") {
				if dir, err = unix.Open("/", dirFlags, 0); err != nil {
					return fail(err)
				}
				consulted = append(consulted, dir)
			}
			continue
		case unix.S_IFDIR:
			consulted = append(consulted, fd)
			dir = fd
			continue
		}
		for _, c := range rest {
			if c != "" { // a name after a file ("f/x", "f/.", "f/..")
				unix.Close(fd)
				return fail(&os.PathError{Op: "open", Path: name, Err: unix.ENOTDIR})
			}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			return fail(fmt.Errorf("%s: not a regular file", name))
		}
		// Re-open the O_PATH fd for reading: the file checked is the file
		// read.
		rfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return fail(&os.PathError{Op: "open", Path: name, Err: err})
		}
		return os.NewFile(uintptr(rfd), name), consulted, nil
	}
	return fail(&os.PathError{Op: "open", Path: name, Err: unix.EISDIR})
}

// readlinkFd reads the target of the symlink an O_PATH|O_NOFOLLOW fd holds.
func readlinkFd(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	if n >= len(buf) {
		return "", unix.ENAMETOOLONG
	}
	return string(buf[:n]), nil
}

// reach collects the directories from which a path leads down to a
// directory: its ancestors by "..", in every mount that shows it. A bind
// mount shows a directory at a second place (the manifest's directory
// bound at /etc/sluice from beneath a workspace, or bound into one): each
// view's ancestors are walked too. Views are found in
// /proc/self/mountinfo and opened by the paths it gives, and a view is
// used only if the kernel says it is that directory in that mount
// (device, inode and mount id); one that is not (overmounted, renamed)
// is not reachable by a path either.
type reach struct {
	set    map[devIno]bool // directories a path leads down from
	walked map[viewID]bool
	mounts []mountEntry // read on first need
}

// viewID is a directory in one mount.
type viewID struct {
	devIno
	mnt uint64
}

type mountEntry struct {
	id          uint64
	dev         uint64
	root, point string // the mount's root within its file system; where it is mounted
}

func newReach(set map[devIno]bool) *reach {
	return &reach{set: set, walked: map[viewID]bool{}}
}

// maxReachSteps bounds one walk: far more than any directory depth times
// the mounts that show it.
const maxReachSteps = 1 << 16

// add walks up from dir (an fd the caller keeps), and from each other
// view of each directory on the way.
func (r *reach) add(dir int) error {
	cur, err := unix.Dup(dir)
	if err != nil {
		return err
	}
	defer func() { unix.Close(cur) }()
	for range maxReachSteps {
		v, err := viewOf(cur)
		if err != nil {
			return err
		}
		if r.walked[v] {
			return nil // this view's ancestors are in already
		}
		r.walked[v] = true
		r.set[v.devIno] = true
		if err := r.views(cur, v); err != nil {
			return err
		}
		up, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open ..: %w", err)
		}
		unix.Close(cur)
		cur = up
	}
	return errors.New("directory chain too deep")
}

func viewOf(fd int) (viewID, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_MNT_ID, &stx); err != nil {
		return viewID{}, fmt.Errorf("statx: %w", err)
	}
	v := viewID{devIno{unix.Mkdev(stx.Dev_major, stx.Dev_minor), stx.Ino}, stx.Mnt_id}
	if stx.Mask&unix.STATX_MNT_ID == 0 { // before Linux 5.8: fdinfo has it
		id, err := fdinfoMntID(fd)
		if err != nil {
			return viewID{}, err
		}
		v.mnt = id
	}
	return v, nil
}

// fdinfoMntID is the mount id /proc/self/fdinfo gives for fd.
func fdinfoMntID(fd int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "mnt_id:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("no mnt_id in /proc/self/fdinfo")
}

// views walks every other mount's view of the directory fd holds (v).
func (r *reach) views(fd int, v viewID) error {
	if r.mounts == nil {
		ms, err := readMountinfo()
		if err != nil {
			return err
		}
		r.mounts = ms
	}
	var own *mountEntry
	for i := range r.mounts {
		if r.mounts[i].id == v.mnt {
			own = &r.mounts[i]
		}
	}
	if own == nil {
		return fmt.Errorf("mount %d is not in /proc/self/mountinfo", v.mnt)
	}
	kp, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return err
	}
	rel, ok := beneath(own.point, kp)
	if !ok {
		return fmt.Errorf("%s is not beneath its mount point %s", kp, own.point)
	}
	inFS := path.Join(own.root, rel) // the directory's path within its file system
	for _, m := range r.mounts {
		if m.id == v.mnt || m.dev != own.dev {
			continue
		}
		sub, ok := beneath(m.root, inFS)
		if !ok {
			continue // this mount does not show the directory
		}
		there := path.Join(m.point, sub)
		vfd, err := unix.Open(there, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // not reachable by this path (gone, overmounted by a file)
		}
		got, err := viewOf(vfd)
		if err == nil && got == (viewID{v.devIno, m.id}) {
			err = r.add(vfd)
		} else {
			err = nil // another directory is there now: not this view
		}
		unix.Close(vfd)
		if err != nil {
			return err
		}
	}
	return nil
}

// beneath is p relative to dir ("." for dir itself), for clean absolute
// paths as the kernel gives them.
func beneath(dir, p string) (string, bool) {
	switch {
	case p == dir:
		return ".", true
	case dir == "/":
		return strings.TrimPrefix(p, "/"), strings.HasPrefix(p, "/")
	case strings.HasPrefix(p, dir+"/"):
		return p[len(dir)+1:], true
	}
	return "", false
}

// readMountinfo reads this process's mounts.
func readMountinfo() ([]mountEntry, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []mountEntry
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		id, err1 := strconv.ParseUint(f[0], 10, 64)
		maj, min, ok := strings.Cut(f[2], ":")
		ma, err2 := strconv.ParseUint(maj, 10, 32)
		mi, err3 := strconv.ParseUint(min, 10, 32)
		if err1 != nil || !ok || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("/proc/self/mountinfo: malformed line %q", line)
		}
		out = append(out, mountEntry{id: id, dev: unix.Mkdev(uint32(ma), uint32(mi)),
			root: sandbox.UnescapeMountinfo(f[3]), point: sandbox.UnescapeMountinfo(f[4])})
	}
	return out, nil
}

// CheckWrites refuses a policy one of whose files a write or delete
// tool's root (roots, by tool, as the manifest lists them) can reach: the
// agent could replace the file, and the next reload would load its policy.
func (pf *Files) CheckWrites(m *authz.Manifest, roots map[string][]*securefs.Root) error {
	for _, name := range sortedToolNames(m) {
		t := m.Tools[name]
		if o := authz.LookupOp(t.Operation); o == nil || !o.WritesRoots() {
			continue // it changes no file beneath its roots
		}
		if err := pf.CheckRoots("tools."+name+".roots", t.Roots, roots[name], "a "+string(t.Operation)+" tool"); err != nil {
			return err
		}
	}
	return pf.checkSecretRoots(m, roots)
}

// CheckRoots refuses roots (key[i] spelled as spelled[i]; nil where a
// root is missing) of which one can reach the manifest or a file it names:
// who is the one that could rewrite the policy through them ("a write
// tool", "a command's changeset").
func (pf *Files) CheckRoots(key string, spelled []string, roots []*securefs.Root, who string) error {
	for i, root := range roots {
		if root == nil {
			continue // missing: not opened until a reload finds it
		}
		id, _, err := statID(int(root.Fd()))
		runtime.KeepAlive(root)
		if err != nil {
			return fmt.Errorf("manifest: %s[%d]: %w", key, i, err)
		}
		for _, f := range pf.files {
			if f.dirs[id] {
				rp, _ := root.Path()
				return fmt.Errorf("manifest: %s[%d]: %q (%s) can reach %s, the %s: %s could rewrite the policy; keep the manifest, and every file it names, out of every write and delete root (docs/manifest.md)",
					key, i, spelled[i], rp, f.path, f.what(), who)
			}
		}
	}
	return nil
}

// what says which file it is, for an error.
func (f *policyFile) what() string {
	if f.key == "manifest" {
		return "manifest"
	}
	if f.secret {
		return "credential file of " + strings.TrimSuffix(f.key, ".value_file")
	}
	return "seccomp profile of " + strings.TrimSuffix(f.key, ".seccomp")
}

func sortedToolNames(m *authz.Manifest) []string {
	names := make([]string, 0, len(m.Tools))
	for n := range m.Tools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
