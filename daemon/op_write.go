//go:build linux

package daemon

import (
	"context"
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/udiff"
)

// The daemon's half of write (authz/op_write.go is its pure half): the
// content is written beside the target under a temp name from the call id
// and renamed over it only if the file is still as the call requires
// (writes.go: the commit machinery write and delete share).
func execWrite(c *call, _ func(string, []byte)) *outcome {
	pr := c.parent(0)
	wa, ok := c.areq.Args.(*authz.WriteArgs)
	if pr == nil || !ok {
		return &outcome{reason: api.ReasonInternalError}
	}
	mode, err := fileop.ParseWriteMode(string(wa.Mode))
	if err != nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(pr.root.Fd()), &st); err != nil {
		return c.commitOutcome(err, "write")
	}
	unlock := c.d.locks.Lock(pr.p)
	defer unlock()
	if testHookBeforeCommit != nil {
		testHookBeforeCommit(c)
	}
	res, err := fileop.Write(pr.p, wa.Content, fileop.WriteOptions{
		Mode: mode, Perm: fs.FileMode(c.tool.EffectiveFileMode()),
		// New files belong to whoever owns the root, not to root.
		UID: int(st.Uid), GID: int(st.Gid),
		// The parent is checked again at commit: had it moved after the
		// temp was named, the write is abandoned and the temp removed.
		Check: func(cur fileop.Current) error {
			if err := c.checkParentAt(0, pr.p); err != nil {
				return err
			}
			return c.commitCheck(cur)
		},
		// The temp name is derived from the call id: the decision record,
		// durable before this runs, names the parent (root_path and rel)
		// and the call, which is all start-up recovery needs to find a
		// temp file a crash left (recover.go). No journal, no extra sync.
		TempName: writeTempName(c.id),
		OnTemp:   func(dir *fileop.Parent, _ string) error { return c.checkParentAt(0, dir) },
		MinFree:  c.d.cfg.MinFree,
	})
	if err != nil && !errors.Is(err, fileop.ErrNotDurable) {
		return c.commitOutcome(err, "write")
	}
	return c.committed(err, "write", res.SHA256, res.Bytes)
}

// writeTempName is the temporary name a write of call id uses beside its
// target: recovery derives it from the decision record the same way.
func writeTempName(id string) string { return fileop.TempPrefix + id }

// showWriteNow adds the file as it is now and a unified diff of the new
// content (read back from the spill, and checked to be the content whose
// digest the call carries) against it. The current file is reached
// beneath the tool's root under the manifest in force now, through fds
// (never by a path string), as the approved write will reach it.
func showWriteNow(ctx context.Context, d *Daemon, p *policy, pk *parked, ch *api.ApprovalChange) {
	cur, old, known := d.currentFile(ctx, p, &pk.shown)
	ch.Current, ch.CurrentUnknown = cur, !known
	content, ok := d.parkedContent(pk)
	switch {
	case !ok:
		// The call ended while it was listed: sizes and digests only.
	case !known:
		// The file cannot be looked at now: sizes and digests only.
	case !isText(content) || !isText(old):
		ch.Binary = true
	case old == nil && cur != nil, len(content) > maxDiffInput:
		ch.DiffTruncated = true // too large to diff
	default:
		name := pk.shown.path
		oldName := name
		if cur == nil {
			oldName = ""
		}
		ch.Diff, ch.DiffTruncated, _ = udiff.Unified(oldName, name, string(old), string(content))
	}
}
