//go:build linux

package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/secretscan"
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
	// With a redact key the bytes hashed are scanned in the same pass.
	var scan *secretscan.Writer
	var tee io.Writer
	if s := c.tool.Redactor(); s != nil {
		scan = s.NewWriter(io.Discard)
		tee = scan
	}
	info, err := fileop.StatTee(c.ctx, h, tee)
	if err != nil {
		return &outcome{reason: c.reasonOf(err, "stat")}
	}
	secrets := statSecrets(scan, info)
	if secrets.Total() > 0 {
		// A digest of a file holding a secret would let a guess at a
		// short one be checked offline, as a redacted read's would.
		info.SHA256 = ""
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
	o := &outcome{ok: true, reason: api.ReasonAllowed, output: out, result: &statResult{sha256: info.SHA256}}
	if secrets.Total() > 0 {
		o.redacted = secrets // what hid the digest; the output itself holds none
	}
	return o
}

// statSecrets is what the tool's redact key found in the bytes a stat
// hashed (scan, fed by fileop.StatTee); nil without a redact key or a
// digest.
func statSecrets(scan *secretscan.Writer, info fileop.Info) secretscan.Counts {
	if scan == nil || info.SHA256 == "" {
		return nil
	}
	if scan.Flush() != nil {
		return secretscan.Counts{"unchecked": 1} // the digest is left out rather than told unchecked
	}
	return scan.Counts()
}

// statResult is a stat's own result: a regular file's digest (up to the
// hash cap), for the result's source; the rest is in its output.
type statResult struct{ sha256 string }

func (r *statResult) wire(res *api.CallResult) {}

func (r *statResult) record(rec *audit.Record) {}

func (r *statResult) answered() bool { return false }

// source: a stat of a regular file up to the hash cap knows its digest.
func (r *statResult) source(s *api.Source) { s.SHA256 = r.sha256 }
