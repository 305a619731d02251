//go:build linux

package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/errclass"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/foldname"
	"github.com/sluicehq/sluice/internal/securefs"
)

// parentRef is a write's or delete's parent directory, resolved beneath a
// root, and the final name in it; rootPath is the root as the manifest
// writes it.
type parentRef struct {
	p        *fileop.Parent
	root     *securefs.Root
	rootPath string
	// cur is the final name as it was when the decision looked at it: a
	// move binds to that inode (fileop.MoveOptions.Source).
	cur fileop.Current
}

func (t *heldTarget) closeParents() {
	for _, pr := range t.parents {
		pr.p.Close()
	}
	t.parents = nil
}

// resolveParent resolves the parent directory beneath the root and looks
// at the final name without following it: a name that does not exist yet
// is KindAbsent (a write creates it), a symlink is KindSymlink (a write
// refuses it, a delete removes the link itself).
func (c *call) resolveParent(tg *heldTarget, root *securefs.Root, m authz.RootMatch, res *authz.Resource) error {
	pp, err := fileop.ResolveParent(root, m.Rel)
	if err != nil {
		return err
	}
	if foldname.HasPrefix(pp.Name, fileop.TempPrefix) {
		// Another write's temp name: never a target.
		pp.Close()
		return fmt.Errorf("%q: %w", pp.Name, securefs.ErrInvalidPath)
	}
	cur, err := pp.Stat()
	if err != nil {
		pp.Close()
		return err
	}
	abs, rel, err := pp.Locate()
	if err != nil {
		pp.Close()
		c.d.log.Error("resolved parent not where expected; denying", "err", err, "call_tool", c.req.Tool)
		return errMisplaced
	}
	res.Outcome, res.Kind, res.Path, res.Rel = authz.OutcomeOK, cur.Kind, abs, rel
	res.Links = links(cur.Kind, cur.Nlink)
	if tg.parents == nil {
		tg.parents = map[int]*parentRef{}
	}
	tg.parents[m.Index] = &parentRef{p: pp, root: root, rootPath: m.Root, cur: cur}
	return nil
}

// testHookBeforeCommit, set by tests only, runs between a write's
// decision and its commit.
var testHookBeforeCommit func(*call)

// errStaleTask: the call's task was cancelled between decision and commit.
var errStaleTask = errclass.New(api.ReasonTaskCancelled, "the task was cancelled before the write committed")

// errCancelledCall: the call was cancelled by id between decision and
// commit.
var errCancelledCall = errclass.New(api.ReasonCancelled, "the call was cancelled before the write committed")

// commitCheck is what must still hold when a write or delete commits: the
// task's generation is the one the call was decided under, the call was
// not cancelled by id (a client merely gone does not stop it), and if_match
// matches the file as it is now (under the per-name lock).
func (c *call) commitCheck(cur fileop.Current) error {
	var ifMatch string
	if p, ok := c.areq.Args.(interface{ Precondition() string }); ok {
		ifMatch = p.Precondition() // a write's or delete's if_match
	}
	return c.commitCheckMatch(cur, ifMatch)
}

// stillLive is what must hold of the call itself when it commits: its
// task's generation is the one it was decided under and it was not
// cancelled by id.
func (c *call) stillLive() error {
	if !c.d.calls.current(c) {
		return errStaleTask
	}
	if errors.Is(context.Cause(c.ctx), errCallCancelled) {
		return errCancelledCall
	}
	return nil
}

// commitCheckMatch is commitCheck with the precondition given: an edit's
// is the digest of the content it read, not the caller's if_match alone.
func (c *call) commitCheckMatch(cur fileop.Current, ifMatch string) error {
	if err := c.stillLive(); err != nil {
		return err
	}
	if c.tool.RefusesHardLinks() && links(cur.Kind, cur.Nlink) > 1 {
		// Linked since the decision (which refuses a linked file): the
		// file is not what the call was decided on. ErrChanged first: its
		// reason, precondition_failed, is the one errclass finds.
		return fmt.Errorf("%w: %w", fileop.ErrChanged, errHardLinked)
	}
	return fileop.MatchIfMatchContext(c.ctx, ifMatch, cur)
}

func (c *call) commitOutcome(err error, op string) *outcome {
	// Every reason is the error's own (fileop's sentinels: the file is not
	// what the call required; ENOSPC no_space, ...) or, for a call
	// cancelled or whose task was, the call's (reasonOf).
	return &outcome{reason: c.reasonOf(err, op)}
}

// committed is the outcome of a write or delete that took effect: err is
// nil (durable) or wraps fileop.ErrNotDurable (the directory fsync after
// the commit failed). Either way the result says what happened, with its
// digest and size, and durable says whether it survives a crash.
func (c *call) committed(err error, op, digest string, size int64) *outcome {
	durable := err == nil
	o := &outcome{ok: true, reason: api.ReasonAllowed, result: &fileResult{digest: digest, size: size, durable: &durable}}
	if !durable {
		c.d.log.Error(op+" committed but not durable", "err", err, "call_id", c.id)
		o.reason = api.ReasonNotDurable
	}
	return o
}

// fileResult is what a committed write or delete left: the sha256 and
// size of what it wrote or removed, and whether the commit is durable
// (false when the directory fsync after it failed).
type fileResult struct {
	digest  string
	size    int64
	durable *bool
}

func (r *fileResult) wire(res *api.CallResult) { res.SHA256, res.Durable = r.digest, r.durable }

func (r *fileResult) record(rec *audit.Record) {
	rec.Result.SHA256, rec.Result.Size, rec.Result.Durable = r.digest, r.size, r.durable
}

func (r *fileResult) answered() bool { return false }

// source: a write, edit, move or delete knows the digest of what it
// wrote, moved or removed.
func (r *fileResult) source(s *api.Source) { s.SHA256 = r.digest }

// checkParentAt runs right before the temp name is created (or a move's
// rename): the parent of the call's target i must still be where the
// decision record says (its rel, from the kernel's name for the fd), or
// recovery would look for the temp file in the wrong place, and a move's
// ends would not be the paths checked against never. A directory moved
// since the decision fails the call (precondition_failed); nothing was
// named yet.
func (c *call) checkParentAt(i int, dir *fileop.Parent) error {
	_, rel, err := dir.Locate()
	if err != nil {
		return err
	}
	if r := c.decidedBy(i); r == nil || rel != r.Rel {
		return fmt.Errorf("parent of %q moved since the decision: %w", dir.Name, fileop.ErrChanged)
	}
	return nil
}

// walkWhereDecided holds c.d.moves shared and checks that target i's
// directory handle is still where the decision saw it (as the kernel names
// its fd now), so that a walk beneath it checks never on the paths its
// entries really have: no call can move it, or a directory above it, until
// done is called. A directory moved between the decision and now (by the
// agent's own move, or from outside) fails precondition_failed.
func (c *call) walkWhereDecided(i int) (done func(), err error) {
	c.d.moves.RLock()
	h, r := c.handle(i), c.decidedBy(i)
	if h == nil || r == nil {
		c.d.moves.RUnlock()
		return nil, errMisplaced
	}
	roots := c.p.roots[c.req.Tool]
	if r.Root < 0 || r.Root >= len(roots) || roots[r.Root] == nil {
		c.d.moves.RUnlock()
		return nil, errMisplaced
	}
	var now authz.Resource
	if err := relBeneath(roots[r.Root], h, &now); err != nil {
		c.d.moves.RUnlock()
		return nil, err
	}
	if h.File() != nil && now.Rel != r.Rel {
		c.d.moves.RUnlock()
		return nil, fmt.Errorf("%q moved since the decision: %w", r.Rel, fileop.ErrChanged)
	}
	return c.d.moves.RUnlock, nil
}
