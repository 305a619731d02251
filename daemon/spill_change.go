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
	"github.com/sluicehq/sluice/internal/termsafe"
)

// maxDiffInput is the most of either side of a write that is diffed;
// larger files are shown by size and digest only.
const maxDiffInput = 1 << 20

// approvalChange is what a parked call would change, for the approver,
// as its operation renders it (docs/design.md §2, "An operation is one
// unit"): what the args say, made when the call parked (authz.Op.Approval),
// and what the operation's daemon half adds now (opSpec.show: a write's
// diff against the file as it is, a delete's file, a post's body). Then
// every character of it that a terminal would act on or not draw is
// counted (HiddenChars), so that every client can warn (docs/security.md,
// "The third review": a diff with a CR and ESC[2K showed an approver
// `+echo done` for a curl line). Nothing here binds the approval: a write
// and a post are bound to their content digest, and a write to the file
// only through its if_match, checked when it commits, as ever.
func (d *Daemon) approvalChange(ctx context.Context, p *policy, pk *parked) *api.ApprovalChange {
	v := &pk.shown
	if v.change == nil {
		return nil
	}
	ch := *v.change
	if v.op != nil && v.op.show != nil {
		v.op.show(ctx, d, p, pk, &ch)
	}
	ch.HiddenChars = hiddenChars(&ch)
	return &ch
}

// hiddenChars counts what termsafe would escape in ch: its summary as
// single-line fields, its diff and body as text.
func hiddenChars(ch *api.ApprovalChange) int {
	n := 0
	for _, f := range ch.Summary {
		_, k := termsafe.Escape(f.Value, false)
		n += k
	}
	_, k := termsafe.Escape(ch.Diff, true)
	n += k
	_, k = termsafe.Escape(string(ch.Body), true)
	n += k
	for _, c := range ch.Changes {
		_, k = termsafe.Escape(c.Path, false)
		n += k
	}
	return n
}

func isText(b []byte) bool { return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 }

// parkedContent reads a parked write's content (or a post's body) back
// from its spill and checks it against the digest the call carries.
func (d *Daemon) parkedContent(pk *parked) ([]byte, bool) {
	if pk.sp == nil || pk.content == "" {
		return nil, false
	}
	body, err := d.approvals.spill.Get(pk.sp)
	if err != nil {
		// Most often the call ended while the list was made.
		d.log.Debug("a parked write's spilled body cannot be read", "err", err, "approval_id", pk.id)
		return nil, false
	}
	// The body was decoded strictly (exact keys, no repeats) when the
	// call came in; its operation decodes its args again, as it did
	// then, and says what the approval binds (authz.Args.Bound).
	v := &pk.shown
	if v.op == nil || v.t == nil {
		return nil, false
	}
	var raw struct {
		Args json.RawMessage `json:"args"`
	}
	if json.Unmarshal(body, &raw) != nil {
		return nil, false
	}
	a, err := v.op.DecodeArgs(v.t, raw.Args)
	if err != nil {
		return nil, false
	}
	content := a.Bound
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
