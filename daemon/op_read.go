//go:build linux

package daemon

import (
	"io"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/securefs"
)

// The daemon's half of read (authz/op_read.go is its pure half): it reads
// the file handle resolved for the call, never its path.
func execRead(c *call, _ func(string, []byte)) *outcome {
	if !c.tool.RefusesHardLinks() {
		return c.fileTool(readCapped)
	}
	return c.fileTool(func(h *securefs.Handle, limit int64) ([]byte, bool, error) {
		return readFile(h, limit, true)
	})
}

// fileTool runs f, read's or list's, on the handle the call resolved.
func (c *call) fileTool(f func(*securefs.Handle, int64) ([]byte, bool, error)) *outcome {
	h := c.handle(0)
	if h == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	data, trunc, err := f(h, c.tool.EffectiveMaxBytes())
	if err != nil {
		// Linked since the decision: unsupported_file_type, as the
		// decision says of a linked file; EIO internal_error, EMFILE busy, …
		return &outcome{reason: c.reasonOf(err, "file tool")}
	}
	return &outcome{ok: true, reason: api.ReasonAllowed, output: data, truncated: trunc}
}

// readCapped reads at most max bytes of the resolved regular file, reading
// one byte more to learn whether there was more (truncated). The file is
// opened through its resolved fd, never by path. A sparse 1 TiB file costs
// one read of max+1 bytes.
func readCapped(h *securefs.Handle, limit int64) ([]byte, bool, error) {
	return readFile(h, limit, false)
}

// readFile is readCapped; with refuseLinks, a file that has gained
// another name since it was resolved (fstat of the fd it reads: the
// decision saw one link) is refused with errHardLinked.
func readFile(h *securefs.Handle, limit int64, refuseLinks bool) ([]byte, bool, error) {
	f, err := h.Open()
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	if refuseLinks {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			return nil, false, err
		}
		if links(h.Kind, uint64(st.Nlink)) > 1 {
			return nil, false, errHardLinked
		}
	}
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
