package daemon

// awaitApproval parks a call that needs a human. This build has no queue
// yet: the call is denied approval_required, never run unapproved.
func (c *call) awaitApproval(em emitter) bool {
	c.dec.Pending = false
	return true
}
