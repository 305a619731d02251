//go:build linux

package daemon

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/daemon/admission"
)

// errBusy says that no container slot came free within the queue timeout.
var errBusy = admission.ErrBusy

// waitSlot holds an allowed execute call until it may run a container. The
// wait is not part of the command's timeout_ms: the sandbox's timer starts
// in Exec, after this. A call that gets no slot in time ends busy; nil means
// a slot is held, to be given back with c.d.slots.Release(c.owner).
func (c *call) waitSlot() *outcome {
	begin := time.Now()
	err := c.d.slots.Acquire(c.ctx, c.owner, c.d.cfg.QueueTimeout)
	switch {
	case err == nil:
		if waited := time.Since(begin); waited >= time.Millisecond {
			c.d.log.Debug("execute call admitted after queueing", "call_id", c.id, "tool", c.req.Tool, "waited", waited.String())
		}
		return nil
	case errors.Is(err, errBusy):
		c.d.log.Warn("execute call not admitted: all container slots stayed taken", "call_id", c.id, "tool", c.req.Tool,
			"max_containers", c.d.cfg.MaxContainers, "queue_timeout", c.d.cfg.QueueTimeout.String())
		return &outcome{reason: api.ReasonBusy}
	default:
		// Ended while queued: the client went away, its task was
		// cancelled, or sluiced is shutting down.
		return &outcome{reason: c.endReason()}
	}
}
