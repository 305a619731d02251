//go:build linux

package daemon

import (
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/daemon/admission"
)

// Decision records of peers mapped to no principal are rate limited per
// uid (admission.DropLimiter).

// keepDecisionRecord is the limiter's one question from auditDecision:
// false for a denied call of a peer mapped to no principal that is over
// its uid's rate. Every other decision is always recorded.
func (c *call) keepDecisionRecord() bool {
	if c.areq.Principal != "" || c.dec.Allowed() || c.dec.Pending() || c.d.drops == nil {
		return true
	}
	return c.d.drops.Allow(c.peer.UID, c.peer.GID)
}

// auditDropped writes (and syncs) the summary of n decision records not
// written for uid.
func (d *Daemon) auditDropped(uid, gid uint32, n int) {
	err := d.ledger.AppendSync(&audit.Record{Kind: audit.KindDropped, Principal: &audit.Principal{UID: uid, GID: gid},
		Reason: api.ReasonPrincipalNotAllowed, Detail: admission.DroppedDetail(uid, n)})
	if err != nil {
		d.log.Error("audit dropped record failed", "err", err, "uid", uid, "count", n)
	}
}
