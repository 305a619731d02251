//go:build linux

package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
)

// The daemon's half of list (authz/op_list.go is its pure half): it lists
// the directory handle resolved for the call, never its path, and each
// directory below it (depth, sizes) opened from its parent's fd one name
// at a time (openBeneath), never through a symlink.

func execList(c *call, _ func(string, []byte)) *outcome {
	la, _ := c.areq.Args.(*authz.ListArgs)
	h, r := c.handle(0), c.decidedBy(0)
	if la == nil || h == nil || r == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	done, err := c.walkWhereDecided(0)
	if err != nil {
		return &outcome{reason: c.reasonOf(err, "list")}
	}
	defer done()
	f, err := h.Open()
	if err != nil {
		return &outcome{reason: c.reasonOf(err, "list")}
	}
	defer f.Close()
	l := lister{t: c.tool, root: r.Root, sizes: la.Sizes, left: maxListScan, budget: c.tool.EffectiveMaxBytes()}
	entries, _, err := l.dir(f, r.Rel, la.Depth, true)
	if err != nil {
		return &outcome{reason: c.reasonOf(err, "list")}
	}
	out, trunc := listLines(entries, c.tool.EffectiveMaxBytes())
	return &outcome{ok: true, reason: api.ReasonAllowed, output: out, truncated: trunc || l.truncated}
}

// maxListScan bounds how many directory entries one list call reads, at
// every depth together.
const maxListScan = 100_000

// lister lists a directory and, to a depth, the directories beneath it.
type lister struct {
	t     *authz.Tool
	root  int
	sizes bool
	// left is how many more entries may be read; budget roughly how many
	// more bytes of output the entries made so far leave (a tree stops
	// growing once it cannot be returned).
	left, budget int64
	truncated    bool
}

// dir lists the directory f, at rel beneath the tool's root, to levels
// levels (0: none, only its total when sizes asks for one): its entries
// sorted by name, symlinks reported as links (lstat, never followed),
// names the tool's never globs hide left out with all beneath them. total
// is the size of the regular files beneath it that a listing shows. The
// top directory's entries are all kept (the output is cut at a whole line
// within max_bytes); below it, a tree stops growing once it could not be
// returned.
func (l *lister) dir(f *os.File, rel string, levels int, top bool) (entries []api.Entry, total int64, err error) {
	names, err := l.names(f)
	if err != nil {
		return nil, 0, err
	}
	dfd := int(f.Fd())
	for _, name := range names {
		crel := path.Join(rel, name)
		if authz.NeverMatchResolved(l.t, l.root, crel) {
			continue
		}
		var st unix.Stat_t
		e := api.Entry{Name: name, Type: "other"}
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			e.Type = entryType(st.Mode)
			if e.Type == "file" {
				e.Size = st.Size
				total += st.Size
			}
		} else if err == unix.ENOENT {
			continue // removed while we listed
		}
		if e.Type == "dir" && (levels > 1 || l.sizes) && l.budget > 0 {
			children, sub, err := l.sub(dfd, name, crel, levels-1)
			if err != nil {
				return nil, 0, err
			}
			if levels > 1 {
				e.Children = children
			}
			if l.sizes {
				e.Size = sub
				total += sub
			}
		}
		if levels > 0 {
			if l.budget -= int64(len(name)) + 32; l.budget < 0 && !top {
				l.truncated = true
				break
			}
			entries = append(entries, e)
		}
	}
	return entries, total, nil
}

// sub lists the directory name in dfd, opened beneath it without
// following a symlink; one that is no longer a directory there (swapped
// since its lstat) or gone is left as it is, without children.
func (l *lister) sub(dfd int, name, rel string, levels int) ([]api.Entry, int64, error) {
	fd, err := openBeneath(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR),
		errors.Is(err, unix.EXDEV), errors.Is(err, unix.EACCES):
		return nil, 0, nil
	case err != nil:
		return nil, 0, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return l.dir(f, rel, levels, false)
}

// names reads f's names, sorted, within what is left of the scan.
func (l *lister) names(f *os.File) ([]string, error) {
	var names []string
	for {
		batch, err := f.Readdirnames(1024)
		names = append(names, batch...)
		if int64(len(names)) >= l.left {
			names, l.truncated = names[:l.left], true
			break
		}
		if errors.Is(err, io.EOF) || len(batch) == 0 {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	l.left -= int64(len(names))
	sort.Strings(names)
	return names, nil
}

// listLines is entries as a list's output: one JSON object per line (a
// directory's children nested in it), stopping at a whole line within
// max bytes; truncated says more existed.
func listLines(entries []api.Entry, max int64) ([]byte, bool) {
	var out bytes.Buffer
	for i := range entries {
		line, _ := json.Marshal(&entries[i])
		if int64(out.Len()+len(line)+1) > max {
			return out.Bytes(), true
		}
		out.Write(line)
		out.WriteByte('\n')
	}
	return out.Bytes(), false
}

// openBeneath opens the one name (no "/", as a directory lists it) in
// dirfd with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS: a symlink there,
// or one swapped in since the name was listed, is ELOOP, never followed
// (O_NOFOLLOW where openat2 is missing: ELOOP or ENOTDIR).
func openBeneath(dirfd int, name string, flags int) (int, error) {
	if name == "" || name == "." || name == ".." || bytes.IndexByte([]byte(name), '/') >= 0 {
		return -1, unix.EINVAL
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for range 16 {
		fd, err := unix.Openat2(dirfd, name, &how)
		switch err {
		case unix.EAGAIN, unix.EINTR:
			continue
		case unix.ENOSYS:
			return unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
		return fd, err
	}
	return -1, unix.EAGAIN
}

func entryType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}
