//go:build linux

package policyfiles

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/securefs"
)

// A credential's value file (docs/manifest.md, "credentials") holds what
// the agent must never hold. It is read when the manifest loads, and
// refused unless nobody but root could have written it or what leads to
// it, and nobody but root (and the file's group) can read it:
//   - the file is a regular file owned by root, mode 0600 or 0640 at most
//     (no execute, set-id or sticky bit, nothing for others): a laxer
//     mode is a secret any local user could already read, or rewrite;
//   - "/" and every directory the walk looks a name up in, and every
//     symlink it follows, are owned by root, and no directory is group-
//     or world-writable unless it is sticky (/tmp): otherwise another uid
//     could swap a name on the way for its own file or symlink, and have
//     sluiced send, say, /etc/shadow's first line to the credential's
//     host; a sticky directory lets no one but root rename or remove
//     root's entries;
//   - no root of any tool can reach the file (CheckWrites): a read tool
//     would hand it to the agent, a write tool replace it.

// MaxSecretBytes bounds a value file: a header value's bound and the
// one trailing newline trimmed.
const MaxSecretBytes = 8192 + 2

// ReadSecret reads the credential value file name (absolute), named key
// in errors, and returns its contents with one trailing newline ("\n" or
// "\r\n") trimmed. Errors say what is wrong with the file, never what it
// holds.
func (pf *Files) ReadSecret(key, name string) ([]byte, error) {
	if !filepath.IsAbs(name) {
		return nil, fmt.Errorf("%s: %q is not absolute", key, name)
	}
	f, consulted, err := openWalk(name, secretComponentOK)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	defer f.Close()
	defer func() {
		for _, d := range consulted {
			unix.Close(d)
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if err := secretFileOK(&st); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", key, name, err)
	}
	p := &policyFile{key: key, path: name, dirs: map[devIno]bool{}, secret: true, id: devIno{uint64(st.Dev), st.Ino}}
	if kp, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd())); err == nil {
		p.path = kp
	}
	r := newReach(p.dirs)
	for _, d := range consulted {
		if err := r.add(d); err != nil {
			return nil, fmt.Errorf("%s: %s: where it lies: %w", key, name, err)
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSecretBytes+1))
	runtime.KeepAlive(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", key, name, err)
	}
	if len(data) > MaxSecretBytes {
		return nil, fmt.Errorf("%s: %s: larger than %d bytes", key, name, MaxSecretBytes)
	}
	if v, ok := bytes.CutSuffix(data, []byte("\n")); ok {
		data, _ = bytes.CutSuffix(v, []byte("\r"))
	}
	pf.files = append(pf.files, p)
	return data, nil
}

// secretComponentOK is ReadSecret's check of each component of the walk.
func secretComponentOK(st *unix.Stat_t) error {
	if st.Uid != 0 {
		return fmt.Errorf("owned by uid %d; everything leading to a credential file must be owned by root", st.Uid)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		return fmt.Errorf("a directory of mode %04o: group- or world-writable without the sticky bit; another user could replace what a credential file is reached through", st.Mode&0o7777)
	}
	return nil
}

// secretFileOK: a root-owned regular file, 0600 or 0640 at most.
func secretFileOK(st *unix.Stat_t) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("not a regular file")
	case st.Uid != 0:
		return fmt.Errorf("owned by uid %d; a credential file must be owned by root (chown root)", st.Uid)
	case st.Mode&0o7777&^0o640 != 0:
		return fmt.Errorf("mode %04o; a credential file must be 0600 or 0640 at most: readable by root and its group, writable by root alone (chmod 0600)", st.Mode&0o7777)
	}
	return nil
}

// checkSecretRoots refuses a root of any tool that can reach a
// credential file: through it the agent could read the value (or, for a
// write or delete tool, replace it).
func (pf *Files) checkSecretRoots(m *authz.Manifest, roots map[string][]*securefs.Root) error {
	for _, name := range sortedToolNames(m) {
		for i, root := range roots[name] {
			if root == nil {
				continue // missing: not opened until a reload finds it
			}
			id, _, err := statID(int(root.Fd()))
			runtime.KeepAlive(root)
			if err != nil {
				return fmt.Errorf("manifest: tools.%s.roots[%d]: %w", name, i, err)
			}
			for _, f := range pf.files {
				if f.secret && f.dirs[id] {
					rp, _ := root.Path()
					return fmt.Errorf("manifest: tools.%s.roots[%d]: %q (%s) can reach %s, the %s: the agent could read the credential through it; keep credential files out of every root (docs/manifest.md, \"credentials\")",
						name, i, m.Tools[name].Roots[i], rp, f.path, f.what())
				}
			}
		}
	}
	return nil
}

// CheckSecretMount refuses a command's mount (key names it) through which
// a container could read a credential file: a directory mount whose root
// is the file's directory or one above it, or a file mount (name in the
// directory dir) that is the file itself. Called once every tool has
// loaded, so every credential file is known.
func (pf *Files) CheckSecretMount(key string, dir *securefs.Root, name string) error {
	id, _, err := statID(int(dir.Fd()))
	if err != nil {
		runtime.KeepAlive(dir)
		return fmt.Errorf("manifest: %s: %w", key, err)
	}
	var file devIno
	if name != "" {
		var st unix.Stat_t
		if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			file = devIno{uint64(st.Dev), st.Ino}
		}
	}
	runtime.KeepAlive(dir)
	for _, f := range pf.files {
		if !f.secret {
			continue
		}
		if (name == "" && f.dirs[id]) || (name != "" && file == f.id) {
			return fmt.Errorf("manifest: %s can reach %s, the %s: a command could read the credential through it; keep credential files out of every mount (docs/manifest.md, \"credentials\")",
				key, f.path, f.what())
		}
	}
	return nil
}
