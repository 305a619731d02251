//go:build linux

package daemon

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/errclass"
	"github.com/sluicehq/sluice/internal/fileop"
)

// The daemon's half of move (authz/op_move.go is its pure half): both
// names locked (in one global order), both parents checked to be where
// the decision saw them, a directory's entries walked beneath its fd and
// each checked at its new path (authz.MoveChangesHidden), then one
// renameat2(RENAME_NOREPLACE) between the two held parent fds, bound to
// the inode the decision saw (fileop.Move). Nothing is named but the
// destination: a move leaves no temp file for recovery.

// maxMoveEntries bounds the entries a directory move walks to check them
// against never; a larger tree is not moved (limit_exceeded): names that
// were not looked at cannot be vouched for.
const maxMoveEntries = 10_000

var (
	errCarriesHidden = errclass.New(api.ReasonNeverListed, "the directory holds an entry never-listed at one of its paths and not at the other")
	errMoveTooBig    = errclass.New(api.ReasonLimitExceeded, "the directory holds more entries than a move checks")
	errMoveIntoSelf  = errclass.New(api.ReasonInvalidArgs, "a directory cannot move beneath itself")
	errMoveCrossFS   = errclass.New(api.ReasonPreconditionFailed, "the source and the destination are on different file systems")
)

func execMove(c *call, _ func(string, []byte)) *outcome {
	src, dst := c.parent(0), c.parent(1)
	ma, ok := c.areq.Args.(*authz.MoveArgs)
	from, to := c.decidedBy(0), c.decidedBy(1)
	if src == nil || dst == nil || !ok || from == nil || to == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	// No list, search or other move walks while this one checks and
	// renames (see Daemon.moves).
	c.d.moves.Lock()
	defer c.d.moves.Unlock()
	unlock := c.d.locks.LockPair(src.p, dst.p)
	defer unlock()
	if testHookBeforeCommit != nil {
		testHookBeforeCommit(c)
	}
	if err := c.moveChecks(src, dst, from, to); err != nil {
		return moveOutcome(c, err)
	}
	res, err := fileop.MoveContext(c.ctx, src.p, dst.p, fileop.MoveOptions{Source: src.cur, IfMatch: ma.IfMatch})
	if err != nil && !errors.Is(err, fileop.ErrNotDurable) {
		return moveOutcome(c, err)
	}
	o := c.committed(err, "move", res.SHA256, res.Size)
	o.output = []byte(fmt.Sprintf("moved %s (a %s) to %s\n", derefOr(ma.Path), res.Kind, derefOr(ma.To)))
	return o
}

// moveChecks is what must hold, under both names' locks, before the
// rename: the call is still live, both parents are where the decision
// saw them (so each end is the path that was checked against never), a
// file gained no other name (in a tool that refuses those), and no entry
// beneath a directory changes from hidden to visible or back.
func (c *call) moveChecks(src, dst *parentRef, from, to *authz.Resource) error {
	if err := c.stillLive(); err != nil {
		return err
	}
	if err := c.checkParentAt(0, src.p); err != nil {
		return err
	}
	if err := c.checkParentAt(1, dst.p); err != nil {
		return err
	}
	cur, err := src.p.Stat()
	if err != nil {
		return err
	}
	if c.tool.RefusesHardLinks() && links(cur.Kind, cur.Nlink) > 1 {
		return fmt.Errorf("%w: %w", fileop.ErrChanged, errHardLinked)
	}
	// A directory's entries, walked beneath its fd without following a
	// symlink, bounded: fail closed on anything the walk cannot see.
	return src.p.WalkNames(c.ctx, src.cur, maxMoveEntries, func(rel string, _ api.Kind) error {
		if authz.MoveChangesHidden(c.tool, from, to, rel) {
			c.d.log.Warn("move refused: it would change what never hides", "entry", rel, "call_id", c.id)
			return errCarriesHidden
		}
		return nil
	})
}

// moveOutcome maps a move's failure to its reason, with a word for the
// caller where the reason alone does not say it.
func moveOutcome(c *call, err error) *outcome {
	switch {
	case errors.Is(err, fileop.ErrTooManyEntries):
		err = fmt.Errorf("%w: %w", errMoveTooBig, err)
	case errors.Is(err, fileop.ErrIntoItself):
		err = fmt.Errorf("%w: %w", errMoveIntoSelf, err)
	case errors.Is(err, fileop.ErrCrossDevice):
		err = fmt.Errorf("%w: %w", errMoveCrossFS, err)
	}
	o := c.commitOutcome(err, "move")
	switch {
	case errors.Is(err, fileop.ErrExists):
		o.output = []byte("the destination exists; a move never replaces\n")
	case errors.Is(err, errCarriesHidden):
		o.output = []byte("the directory holds an entry that never hides at one of its paths and not at the other\n")
	case errors.Is(err, errMoveTooBig):
		o.output = []byte(fmt.Sprintf("the directory holds more than %d entries\n", maxMoveEntries))
	}
	return o
}
