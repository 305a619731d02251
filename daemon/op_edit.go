//go:build linux

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/errclass"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/udiff"
)

// The daemon's half of edit (authz/op_edit.go is its pure half): under the
// name's lock the file is read through the held parent (a regular file,
// never followed), the replacements applied, and the result committed as a
// write is (a temp name from the call id renamed over it in the same
// parent fd), only if the file is still exactly what was read: the digest
// of what was read is the commit's precondition, so a change by anyone
// between the read and the rename fails the edit instead of being lost.

// maxEditBytes bounds the file an edit reads, applies to and holds twice
// (old and new) in memory; a larger file is limit_exceeded.
const maxEditBytes = 16 << 20

var errEditTooLarge = errclass.New(api.ReasonLimitExceeded, "the file is larger than an edit reads")

func execEdit(c *call, _ func(string, []byte)) *outcome {
	pr := c.parent(0)
	ea, ok := c.areq.Args.(*authz.EditArgs)
	if pr == nil || !ok {
		return &outcome{reason: api.ReasonInternalError}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(pr.root.Fd()), &st); err != nil {
		return c.commitOutcome(err, "edit")
	}
	unlock := c.d.locks.Lock(pr.p)
	defer unlock()
	old, digest, err := pr.p.ReadAll(c.ctx, maxEditBytes)
	if errors.Is(err, fileop.ErrTooLarge) {
		err = fmt.Errorf("%w: %w", errEditTooLarge, err)
	}
	if err != nil {
		return c.commitOutcome(err, "edit")
	}
	if ea.IfMatch != "" && ea.IfMatch != digest {
		return &outcome{reason: api.ReasonPreconditionFailed, output: []byte("if_match: the file's content is " + digest + "\n")}
	}
	edits := make([]fileop.Edit, len(ea.Edits))
	for i, e := range ea.Edits {
		edits[i] = fileop.Edit{Old: e.OldText, New: e.NewText}
	}
	content, err := fileop.ApplyEdits(old, edits)
	if err != nil {
		return editFailed(err)
	}
	name := derefOr(ea.Path)
	o := &outcome{ok: true, reason: api.ReasonAllowed}
	o.output, o.truncated = editDiff(name, old, content, c.tool.EffectiveMaxBytes())
	if ea.DryRun {
		o.result = &fileResult{digest: sha256Of(content), size: int64(len(content))}
		return o
	}
	if testHookBeforeCommit != nil {
		testHookBeforeCommit(c)
	}
	res, err := fileop.Write(pr.p, content, fileop.WriteOptions{
		// The file exists (it was just read): it is replaced, keeping its
		// owner and mode, as an editor's save does.
		Mode: fileop.Overwrite, Perm: fs.FileMode(authz.DefaultFileMode),
		UID: int(st.Uid), GID: int(st.Gid),
		Check: func(cur fileop.Current) error {
			if err := c.checkParentAt(0, pr.p); err != nil {
				return err
			}
			// Still what was read: the edits applied to that content.
			return c.commitCheckMatch(cur, digest)
		},
		// The write's temp name (recover.go finds it the same way).
		TempName: c.op.tempName(c.id), // the temp name its table line gives (recovery finds it by it)
		OnTemp:   func(dir *fileop.Parent, _ string) error { return c.checkParentAt(0, dir) },
		MinFree:  c.d.cfg.MinFree,
	})
	if err != nil && !errors.Is(err, fileop.ErrNotDurable) {
		return c.commitOutcome(err, "edit")
	}
	done := c.committed(err, "edit", res.SHA256, res.Bytes)
	done.output, done.truncated = o.output, o.truncated
	return done
}

// editFailed is the outcome of edits that do not apply: which edit, and
// how many times its old_text occurs (precondition_failed), for the
// caller to correct; an empty old_text (decoding refuses it) is
// invalid_args.
func editFailed(err error) *outcome {
	var ee *fileop.EditError
	switch {
	case errors.As(err, &ee):
		msg := fmt.Sprintf("args.edits[%d].old_text occurs %d times in the file, want exactly once\n", ee.Index, ee.Count)
		if ee.Count == 0 {
			msg = fmt.Sprintf("args.edits[%d].old_text is not in the file (0 matches, want exactly once)\n", ee.Index)
		}
		return &outcome{reason: reasonOr(err), output: []byte(msg)}
	}
	return &outcome{reason: reasonOr(err)}
}

// reasonOr is the reason err carries (errclass), else internal_error.
func reasonOr(err error) api.Reason {
	if r, ok := errclass.Reason(err); ok {
		return r
	}
	return api.ReasonInternalError
}

// editDiff is an edit's output: the unified diff of old → new, at most
// max bytes (truncated); a file that is not text is described, not
// diffed.
func editDiff(name string, old, content []byte, max int64) ([]byte, bool) {
	if !isText(old) || !isText(content) {
		return []byte("binary file changed; no diff\n"), false
	}
	diff, truncated, tooLarge := udiff.Unified(name, name, string(old), string(content))
	if tooLarge {
		return []byte("file too large to diff; see sha256\n"), true
	}
	if int64(len(diff)) > max {
		return []byte(diff[:max]), true
	}
	return []byte(diff), truncated
}

// showEditNow adds the file as it is now and the diff the parked edits
// (read back from the spill, checked to be the edits the approval binds)
// make of it; edits that do not apply to the file as it is now say so.
func showEditNow(ctx context.Context, d *Daemon, p *policy, pk *parked, ch *api.ApprovalChange) {
	cur, old, known := d.currentFile(ctx, p, &pk.shown)
	ch.Current, ch.CurrentUnknown = cur, !known
	raw, ok := d.parkedContent(pk)
	var edits []api.Edit
	if !ok || !known || cur == nil || json.Unmarshal(raw, &edits) != nil {
		return // sizes and digests only
	}
	if old == nil {
		ch.DiffTruncated = true // too large to diff
		return
	}
	fe := make([]fileop.Edit, len(edits))
	for i, e := range edits {
		fe[i] = fileop.Edit{Old: e.OldText, New: e.NewText}
	}
	content, err := fileop.ApplyEdits(old, fe)
	if err != nil {
		ch.Summary = append(ch.Summary, api.ChangeField{Label: "does not apply now", Value: string(editFailed(err).output)})
		return
	}
	ch.New = &api.FileState{Size: int64(len(content)), SHA256: sha256Of(content)}
	if !isText(old) || !isText(content) {
		ch.Binary = true
		return
	}
	ch.Diff, ch.DiffTruncated, _ = udiff.Unified(pk.shown.path, pk.shown.path, string(old), string(content))
}

func derefOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
