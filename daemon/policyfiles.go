//go:build linux

package daemon

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/sandbox"
)

// A policy must stay out of the agent's reach: a write or delete tool
// whose root could replace the manifest, or a seccomp profile it names,
// rewrites the policy at the next reload (docs/manifest.md, "Where the
// manifest lives"; docs/security.md, "The third review"). The check is
// made against the kernel, never on path strings: each policy file is
// opened by a walk that records every directory a lookup of its path
// consulted (following symlinks itself), and each such directory's
// ancestors are collected by device and inode through "..". A writable
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
}

// policyFiles are the files a policy load read: the manifest and the
// seccomp profiles its tools name (parsed once each).
type policyFiles struct {
	files   []*policyFile
	seccomp map[string]*sandbox.Profile // by the manifest's seccomp value
}

func newPolicyFiles() *policyFiles {
	return &policyFiles{seccomp: map[string]*sandbox.Profile{}}
}

// maxPolicySymlinks bounds the symlinks one policy path may pass (the
// kernel's own limit).
const maxPolicySymlinks = 40

// read opens name (absolute) by a walk that records each directory it
// looks a name up in, and returns the regular file's contents, read from
// what was opened. key names the file in errors.
func (pf *policyFiles) read(key, name string) ([]byte, error) {
	if !filepath.IsAbs(name) {
		return nil, fmt.Errorf("%s: %q is not absolute", key, name)
	}
	f, consulted, err := openWalk(name)
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
	for _, d := range consulted {
		if err := ancestors(d, p.dirs); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
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
// in. The caller closes them.
func openWalk(name string) (f *os.File, consulted []int, err error) {
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

// ancestors adds dir and every directory above it, by "..", to set,
// up to the root of the mount namespace (whose ".." is itself) or a
// directory already in set (its ancestors are too).
func ancestors(dir int, set map[devIno]bool) error {
	cur, err := unix.Dup(dir)
	if err != nil {
		return err
	}
	defer func() { unix.Close(cur) }()
	for i := 0; i < 4096; i++ {
		id, _, err := statID(cur)
		if err != nil {
			return err
		}
		if set[id] {
			return nil
		}
		set[id] = true
		up, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open ..: %w", err)
		}
		upID, _, err := statID(up)
		if err != nil {
			unix.Close(up)
			return err
		}
		unix.Close(cur)
		cur = up
		if upID == id {
			return nil // "/"
		}
	}
	return errors.New("directory chain too deep")
}

// writesPolicy refuses a policy one of whose files a write or delete
// tool's root can reach: the agent could replace the file, and the next
// reload would load its policy.
func writesPolicy(m *authz.Manifest, roots map[string][]*securefs.Root, files []*policyFile) error {
	for _, name := range sortedToolNames(m) {
		t := m.Tools[name]
		if t.Operation != api.OpWrite && t.Operation != api.OpDelete {
			continue
		}
		for i, root := range roots[name] {
			if root == nil {
				continue // missing: not opened until a reload finds it
			}
			id, _, err := statID(int(root.Fd()))
			runtime.KeepAlive(root)
			if err != nil {
				return fmt.Errorf("manifest: tools.%s.roots[%d]: %w", name, i, err)
			}
			for _, f := range files {
				if f.dirs[id] {
					rp, _ := root.Path()
					return fmt.Errorf("manifest: tools.%s.roots[%d]: %q (%s) can reach %s, the %s: a %s tool could rewrite the policy; keep the manifest, and every file it names, out of every write and delete root (docs/manifest.md)",
						name, i, t.Roots[i], rp, f.path, f.what(), t.Operation)
				}
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
