//go:build linux

package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"unicode/utf8"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/securefs"
)

// maxDiffInput is the most of either side of a write that is diffed;
// larger files are shown by size and digest only.
const maxDiffInput = 1 << 20

// approvalChange is what a parked call would change, for the approver
// (finding: an approver of a write saw only a digest). A write shows a
// unified diff of its content (read back from the spill, and checked to
// be the content whose digest the call carries) against the file as it
// is now; a delete shows the file's size and digest; an execute call its
// argv. The current file is reached beneath the tool's root under the
// manifest in force now, through fds (never by a path string), as the
// approved call will reach it. Nothing here binds the approval: the
// write is bound to its content digest, and to the file's only through
// its if_match, checked when it commits, as ever.
func (d *Daemon) approvalChange(ctx context.Context, p *policy, pk *parked) *api.ApprovalChange {
	v := &pk.shown
	if v.t == nil {
		return nil
	}
	switch v.t.Operation {
	case api.OpExecute:
		argv := v.argv
		if argv == nil && len(v.t.Commands) == 1 {
			argv = v.t.Commands[0]
		}
		return &api.ApprovalChange{Argv: argv}
	case api.OpDelete:
		cur, _, _ := d.currentFile(ctx, p, v)
		return &api.ApprovalChange{Current: cur}
	case api.OpPost:
		body, ok := d.parkedContent(pk)
		if !ok {
			return nil
		}
		return &api.ApprovalChange{URL: v.url, Body: body, New: &api.FileState{Size: int64(len(body)), SHA256: pk.content}}
	case api.OpWrite:
	default:
		return nil
	}
	content, ok := d.parkedContent(pk)
	if !ok {
		return nil
	}
	ch := &api.ApprovalChange{New: &api.FileState{Size: int64(len(content)), SHA256: pk.content}}
	cur, old, known := d.currentFile(ctx, p, v)
	ch.Current = cur
	switch {
	case !known:
		// The file cannot be looked at now: sizes and digests only.
	case !isText(content) || !isText(old):
		ch.Binary = true
	case old == nil && cur != nil, len(content) > maxDiffInput:
		ch.DiffTruncated = true // too large to diff
	default:
		name := v.path
		oldName := name
		if cur == nil {
			oldName = ""
		}
		ch.Diff, ch.DiffTruncated, _ = unifiedDiff(oldName, name, string(old), string(content))
	}
	return ch
}

func isText(b []byte) bool { return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 }

// parkedContent reads a parked write's content (or a post's body) back
// from its spill and checks it against the digest the call carries.
func (d *Daemon) parkedContent(pk *parked) ([]byte, bool) {
	if pk.sp == nil || pk.content == "" {
		return nil, false
	}
	body, err := d.approvals.spill.get(pk.sp)
	if err != nil {
		// Most often the call ended while the list was made.
		d.log.Debug("a parked write's spilled body cannot be read", "err", err, "approval_id", pk.id)
		return nil, false
	}
	// The body was decoded strictly (exact keys, no repeats) when the
	// call came in; only the content is needed here.
	var raw struct {
		Args struct {
			Content    *string         `json:"content"`
			ContentB64 *string         `json:"content_b64"`
			Body       json.RawMessage `json:"body"`
		} `json:"args"`
	}
	if json.Unmarshal(body, &raw) != nil {
		return nil, false
	}
	var content []byte
	switch {
	case raw.Args.Content != nil:
		content = []byte(*raw.Args.Content)
	case raw.Args.ContentB64 != nil:
		b, err := decodeB64(*raw.Args.ContentB64)
		if err != nil {
			return nil, false
		}
		content = b
	case raw.Args.Body != nil:
		content = raw.Args.Body
	}
	if sha256Of(content) != pk.content {
		d.log.Error("a parked write's spilled content is not the content it was parked with", "approval_id", pk.id)
		return nil, false
	}
	return content, true
}

// currentFile is the parked call's target as it is now: its size and
// digest (nil: it does not exist), its content when it is a regular file
// of at most maxDiffInput bytes, and known=false when it cannot be looked
// at (the tool or its root is gone, the name is not a regular file, an
// error). The parent is resolved beneath the root and the final name
// looked at without following it, as a write and a delete do; the
// content is read through an fd on that same inode.
func (d *Daemon) currentFile(ctx context.Context, p *policy, v *parkedView) (cur *api.FileState, content []byte, known bool) {
	res := v.res
	t := p.m.Tools[v.tool]
	roots := p.roots[v.tool]
	if res == nil || t == nil || res.Root >= len(roots) || res.Root >= len(t.Roots) || t.Roots[res.Root] != res.RootPath || roots[res.Root] == nil {
		return nil, nil, false
	}
	root := roots[res.Root]
	pp, err := fileop.ResolveParent(root, res.Rel)
	if err != nil {
		return nil, nil, false
	}
	defer pp.Close()
	st, err := pp.Stat()
	if err != nil {
		return nil, nil, false
	}
	if st.Kind == fileop.KindAbsent {
		return nil, nil, true
	}
	if st.Kind != securefs.KindFile {
		return nil, nil, false
	}
	h, err := root.Resolve(res.Rel)
	if err != nil {
		return nil, nil, false
	}
	defer h.Close()
	if h.Kind != securefs.KindFile || h.Stat.Dev != st.Dev || h.Stat.Ino != st.Ino {
		return nil, nil, false // changed while we looked
	}
	if h.Stat.Size > fileop.MaxHashBytes {
		// As if_match and delete do: a file this large is shown by its
		// size only, never read whole for a listing.
		return &api.FileState{Size: h.Stat.Size}, nil, true
	}
	f, err := h.Open()
	if err != nil {
		return nil, nil, false
	}
	defer f.Close()
	sum := sha256.New()
	var keep bytes.Buffer
	buf := make([]byte, 64<<10)
	var n int64
	for {
		if ctx.Err() != nil {
			return nil, nil, false
		}
		m, err := f.Read(buf)
		if m > 0 {
			sum.Write(buf[:m])
			if keep.Len() <= maxDiffInput {
				keep.Write(buf[:m])
			}
			n += int64(m)
		}
		if n > fileop.MaxHashBytes { // it grew while we read it
			return &api.FileState{Size: n}, nil, true
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, false
		}
	}
	cur = &api.FileState{Size: n, SHA256: "sha256:" + hex.EncodeToString(sum.Sum(nil))}
	if keep.Len() > maxDiffInput {
		return cur, nil, true
	}
	if keep.Len() == 0 {
		return cur, []byte{}, true // empty, not too large
	}
	return cur, keep.Bytes(), true
}
