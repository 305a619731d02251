//go:build linux

package daemon

import (
	"encoding/json"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/internal/fileop"
)

// The daemon's half of stat (authz/op_stat.go is its pure half): it
// describes the handle resolved for the call (fstat of its fd, never the
// path looked up again) and hashes a regular file up to 64 MiB, read from
// that fd. A FIFO, socket or device is described and never opened for
// I/O. The output is an api.Stat JSON document.
func execStat(c *call, _ func(string, []byte)) *outcome {
	h := c.handle(0)
	if h == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	if c.tool.RefusesHardLinks() && h.Kind == api.KindFile {
		// A name gained since the decision (which saw one link) may be
		// never-listed: its digest is not told, as a read refuses it.
		var st unix.Stat_t
		if err := unix.Fstat(int(h.File().Fd()), &st); err != nil {
			return &outcome{reason: c.reasonOf(err, "stat")}
		}
		runtime.KeepAlive(h)
		if links(h.Kind, uint64(st.Nlink)) > 1 {
			return &outcome{reason: c.reasonOf(errHardLinked, "stat")}
		}
	}
	info, err := fileop.Stat(c.ctx, h)
	if err != nil {
		return &outcome{reason: c.reasonOf(err, "stat")}
	}
	out, err := json.Marshal(api.Stat{
		Type:   info.Kind,
		Size:   info.Size,
		Mode:   fmt.Sprintf("%04o", info.Perm),
		MTime:  info.ModTime.UTC().Format(time.RFC3339Nano),
		SHA256: info.SHA256,
	})
	if err != nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	return &outcome{ok: true, reason: api.ReasonAllowed, output: out, result: &statResult{sha256: info.SHA256}}
}

// statResult is a stat's own result: a regular file's digest (up to the
// hash cap), for the result's source; the rest is in its output.
type statResult struct{ sha256 string }

func (r *statResult) wire(res *api.CallResult) {}

func (r *statResult) record(rec *audit.Record) {}

func (r *statResult) answered() bool { return false }

// source: a stat of a regular file up to the hash cap knows its digest.
func (r *statResult) source(s *api.Source) { s.SHA256 = r.sha256 }
