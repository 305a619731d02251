//go:build linux

package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"path"
	"runtime"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/securefs"
)

// The daemon's half of list (authz/op_list.go is its pure half): it lists
// the directory handle resolved for the call, never its path.

func execList(c *call, _ func(string, []byte)) *outcome { return c.fileTool(listOf(c)) }

func listOf(c *call) func(*securefs.Handle, int64) ([]byte, bool, error) {
	return func(h *securefs.Handle, max int64) ([]byte, bool, error) {
		r := c.decidedBy(0)
		return listDir(h, c.tool, r.Root, r.Rel, max)
	}
}

// maxListScan bounds how many directory entries one list call reads.
const maxListScan = 100_000

type listEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Size int64  `json:"size"`
}

// listDir lists the resolved directory: one JSON object per line, sorted by
// name, symlinks reported as links (lstat, never followed), names hidden by
// the tool's never globs left out. Output stops at a whole line within max
// bytes; truncated says more existed.
func listDir(h *securefs.Handle, t *authz.Tool, root int, rel string, max int64) ([]byte, bool, error) {
	f, err := h.Open()
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	var names []string
	truncated := false
	for {
		batch, err := f.Readdirnames(1024)
		names = append(names, batch...)
		if len(names) >= maxListScan {
			names, truncated = names[:maxListScan], true
			break
		}
		if errors.Is(err, io.EOF) || len(batch) == 0 {
			break
		}
		if err != nil {
			return nil, false, err
		}
	}
	sort.Strings(names)
	dfd := int(f.Fd())
	var out bytes.Buffer
	for _, name := range names {
		if authz.NeverMatchResolved(t, root, path.Join(rel, name)) {
			continue
		}
		var st unix.Stat_t
		e := listEntry{Name: name, Type: "other"}
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			e.Type = entryType(st.Mode)
			if e.Type == "file" {
				e.Size = st.Size
			}
		} else if err == unix.ENOENT {
			continue // removed while we listed
		}
		line, _ := json.Marshal(e)
		if int64(out.Len()+len(line)+1) > max {
			truncated = true
			break
		}
		out.Write(line)
		out.WriteByte('\n')
	}
	runtime.KeepAlive(f)
	return out.Bytes(), truncated, nil
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
