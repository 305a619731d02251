//go:build linux

package daemon

import (
	"bytes"
	"io"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/securefs"
)

// The daemon's half of read (authz/op_read.go is its pure half): it reads
// the file handle resolved for the call, never its path. A read without
// a range returns the file's first max_bytes; with offset/limit or tail
// it returns whole lines (fileop.ReadRange) within max_bytes. Either way
// the result carries the file's size, and next_offset when lines follow
// what the output holds.
func execRead(c *call, _ func(string, []byte)) *outcome {
	ra, _ := c.areq.Args.(*authz.ReadArgs)
	if ra == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	h := c.handle(0)
	if h == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	res, err := readLines(c, h, ra, c.tool.RefusesHardLinks())
	if err != nil {
		// Linked since the decision: unsupported_file_type, as the
		// decision says of a linked file; EIO internal_error, EMFILE busy, …
		return &outcome{reason: c.reasonOf(err, "read")}
	}
	return &outcome{ok: true, reason: api.ReasonAllowed, output: res.data, truncated: res.truncated, result: res}
}

// readResult is a read's own result: the file's size, and the line to
// continue from when the output stopped before the file's end.
type readResult struct {
	data       []byte
	truncated  bool
	size       int64
	nextOffset int64
	// firstLine is the file's line the output begins with; tail says it
	// ends with the file's last (redact.go's recut needs both).
	firstLine int64
	tail      bool
	// sha256 is the digest of what was read when it is the whole file
	// (no range, not truncated): the result's source (source.go).
	sha256 string
}

func (r *readResult) wire(res *api.CallResult) {
	res.Size = &r.size
	if r.nextOffset > 0 {
		res.NextOffset = &r.nextOffset
	}
}

func (r *readResult) record(rec *audit.Record) {}

func (r *readResult) answered() bool { return false }

// source: a read of a whole file knows the digest of what it read.
func (r *readResult) source(s *api.Source) { s.SHA256 = r.sha256 }

// readLines reads what ra selects of the resolved file, through its fd.
func readLines(c *call, h *securefs.Handle, ra *authz.ReadArgs, refuseLinks bool) (*readResult, error) {
	limit := c.tool.EffectiveMaxBytes()
	if !ra.Ranged() {
		data, trunc, size, err := readFile(h, limit, refuseLinks)
		if err != nil {
			return nil, err
		}
		r := &readResult{data: data, truncated: trunc, size: size, firstLine: 1}
		if trunc {
			r.nextOffset = nextLine(data)
		} else {
			// The whole file: its digest costs a pass over at most
			// max_bytes, cheaper than the output's JSON encoding, and
			// is what a write's if_match takes next.
			r.sha256 = sha256Of(data)
		}
		return r, nil
	}
	f, err := h.Open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if refuseLinks && links(h.Kind, uint64(st.Nlink)) > 1 {
		return nil, errHardLinked
	}
	rr, err := fileop.ReadRange(c.ctx, f, st.Size, fileop.Range{Offset: ra.Offset, Limit: ra.Limit, Tail: ra.Tail, MaxBytes: limit})
	if err != nil {
		return nil, err
	}
	return &readResult{data: rr.Data, truncated: rr.Truncated, size: rr.Size, nextOffset: rr.NextOffset,
		firstLine: rr.FirstLine, tail: ra.Tail > 0}, nil
}

// nextLine is the line a read continues from after data, the start of a
// file cut by max_bytes: the line the cut fell in, read again whole (the
// output's complete lines come before it). A first line longer than the
// cap is skipped, as fileop.ReadRange skips it, so that a caller that
// keeps continuing always advances.
func nextLine(data []byte) int64 {
	return int64(max(bytes.Count(data, []byte{'\n'}), 1)) + 1
}

// readFile reads at most limit bytes of the resolved regular file,
// reading one byte more to learn whether there was more (truncated), and
// returns the file's size (fstat of the fd it reads). The file is opened
// through its resolved fd, never by path. A sparse 1 TiB file costs one
// read of limit+1 bytes. With refuseLinks, a file that has gained another
// name since it was resolved (the decision saw one link) is refused with
// errHardLinked.
func readFile(h *securefs.Handle, limit int64, refuseLinks bool) ([]byte, bool, int64, error) {
	f, err := h.Open()
	if err != nil {
		return nil, false, 0, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, false, 0, err
	}
	if refuseLinks && links(h.Kind, uint64(st.Nlink)) > 1 {
		return nil, false, 0, errHardLinked
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
			return nil, false, 0, err
		}
		if n < len(buf) && st.Size > 0 && int64(n) >= st.Size && st.Mode&unix.S_IFMT == unix.S_IFREG {
			// A short read of a regular file that has given all fstat
			// said it holds is at its end: no read(2) to be told so.
			// (procfs reports size 0, and is read to its end.)
			break
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
	// The size fstat gave, unless the read saw more (the file grew, or
	// procfs-like files report 0).
	return data, truncated, max(st.Size, int64(n)), nil
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

// recut cuts a read's redacted output to max bytes at a line end (a
// tail keeps its last lines), and moves next_offset to the first line
// it no longer holds. A first line longer than max alone is cut inside,
// and skipped, as fileop.ReadRange does.
func (r *readResult) recut(out []byte, max int64) []byte {
	if r.tail {
		i := bytes.IndexByte(out[int64(len(out))-max:], '\n')
		if i < 0 {
			return nil
		}
		return out[int64(len(out))-max+int64(i)+1:]
	}
	kept := out[:max]
	lines := int64(bytes.Count(kept, []byte{'\n'}))
	if i := bytes.LastIndexByte(kept, '\n'); i >= 0 {
		kept = kept[:i+1]
	} else {
		kept, lines = trimToRune(kept), 1
	}
	r.nextOffset = r.firstLine + lines
	return kept
}
