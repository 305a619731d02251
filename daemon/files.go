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
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/errclass"
	"github.com/sluicehq/sluice/internal/securefs"
)

// execRead and execList act on the handle resolved for the call, never
// on its path.
func execRead(c *call, _ func(string, []byte)) *outcome { return c.fileTool(readCapped) }
func execList(c *call, _ func(string, []byte)) *outcome { return c.fileTool(listOf(c)) }

func listOf(c *call) func(*securefs.Handle, int64) ([]byte, bool, error) {
	return func(h *securefs.Handle, max int64) ([]byte, bool, error) {
		return listDir(h, c.tool, c.dec.Resource.Rel, max)
	}
}

func (c *call) fileTool(f func(*securefs.Handle, int64) ([]byte, bool, error)) *outcome {
	h := c.handles[c.dec.Resource.Root]
	if h == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	data, trunc, err := f(h, c.tool.EffectiveMaxBytes())
	if err != nil {
		c.d.log.Error("file tool failed", "err", err, "call_id", c.id)
		return &outcome{reason: errclass.Reason(err)} // EIO internal_error, EMFILE busy, …
	}
	return &outcome{ok: true, reason: api.ReasonAllowed, output: data, truncated: trunc}
}

// maxListScan bounds how many directory entries one list call reads.
const maxListScan = 100_000

// readCapped reads at most max bytes of the resolved regular file, reading
// one byte more to learn whether there was more (truncated). The file is
// opened through its resolved fd, never by path. A sparse 1 TiB file costs
// one read of max+1 bytes.
func readCapped(h *securefs.Handle, limit int64) ([]byte, bool, error) {
	f, err := h.Open()
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	// Size the buffer from fstat, but trust only what read(2) says: the
	// file may grow, and procfs-like files report size 0.
	size := min(limit+1, max(h.Stat.Size+1, 512))
	buf := make([]byte, size)
	n := 0
	for {
		m, err := f.Read(buf[n:])
		n += m
		if err == io.EOF || (m == 0 && err == nil) {
			break
		}
		if err != nil {
			return nil, false, err
		}
		if n == len(buf) {
			if int64(n) > limit {
				break
			}
			grown := make([]byte, min(limit+1, int64(2*len(buf))))
			copy(grown, buf)
			buf = grown
		}
	}
	data := buf[:n]
	truncated := int64(n) > limit
	if truncated {
		data = trimToRune(data[:limit])
	}
	return data, truncated, nil
}

// trimToRune drops an incomplete UTF-8 sequence that the cap cut in half,
// so that cut text stays text (and is returned as output, not base64).
func trimToRune(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	for k := 1; k <= 3 && k <= len(b); k++ {
		if utf8.Valid(b[:len(b)-k]) {
			return b[:len(b)-k]
		}
	}
	return b
}

type listEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Size int64  `json:"size"`
}

// listDir lists the resolved directory: one JSON object per line, sorted by
// name, symlinks reported as links (lstat, never followed), names hidden by
// the tool's never globs left out. Output stops at a whole line within max
// bytes; truncated says more existed.
func listDir(h *securefs.Handle, t *authz.Tool, rel string, max int64) ([]byte, bool, error) {
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
		if authz.NeverMatch(t, path.Join(rel, name)) {
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
