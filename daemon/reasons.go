//go:build linux

package daemon

import (
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/errclass"
)

// reasonOf turns an error of a call's execution (a commit, a file tool,
// a sandbox, a fetch or post) into the call's reason: the one place the
// daemon does. The error carries its reason or its errno says it
// (errclass); a cancelled call says why it ended (endReason: cancelled,
// task_cancelled, shutdown). An error nothing classifies is
// internal_error, logged as an error for the operator; a classified one is
// logged as a warning with its reason. what names what failed ("write").
func (c *call) reasonOf(err error, what string) api.Reason {
	if err == nil {
		return api.ReasonAllowed
	}
	r, ok := errclass.Reason(err)
	switch {
	case !ok:
		c.d.log.Error(what+" failed", "err", err, "call_id", c.id)
	case r == api.ReasonCancelled && c.ctx.Err() != nil:
		r = c.endReason()
	default:
		c.d.log.Warn(what+" failed", "err", err, "reason", r, "call_id", c.id)
	}
	return r
}

// errHardLinked: a regular file gained another name after the decision,
// in a tool that refuses those (authz.Tool.RefusesHardLinks). A read
// reports it as the decision would have (unsupported_file_type); a commit
// wraps it in fileop.ErrChanged (precondition_failed).
var errHardLinked = errclass.New(api.ReasonUnsupportedFileType, "the file has more than one link")
