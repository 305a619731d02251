//go:build linux

package daemon

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/fileop"
)

// The daemon's half of delete (authz/op_delete.go is its pure half): the
// final name is removed from the parent resolved for the call, never
// followed, only if the file is still as the call requires.
func execDelete(c *call, _ func(string, []byte)) *outcome {
	pr := c.parent(0)
	if pr == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	unlock := c.d.locks.Lock(pr.p)
	defer unlock()
	res, err := fileop.DeleteContext(c.ctx, pr.p, c.commitCheck)
	if err != nil && !errors.Is(err, fileop.ErrNotDurable) {
		return c.commitOutcome(err, "delete")
	}
	return c.committed(err, "delete", res.SHA256, res.Size)
}

// showFileNow adds the file a parked delete would remove, as it is now:
// its size and digest (by size alone over the hash cap).
func showFileNow(ctx context.Context, d *Daemon, p *policy, pk *parked, ch *api.ApprovalChange) {
	var known bool
	ch.Current, _, known = d.currentFile(ctx, p, &pk.shown)
	ch.CurrentUnknown = !known
}
