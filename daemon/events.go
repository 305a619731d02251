//go:build linux

package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/daemon/transport"
)

// handleEvents is GET /v1/events: an NDJSON stream, one event a line,
// flushed as it happens. The first line, "subscribed", carries the policy
// version in force once the follower is subscribed, so a reload between a
// client's GET /v1/tools and its subscription is not missed; then one
// "policy_loaded" per successful reload. A follower that falls
// transport.EventBuffer events behind gets a "dropped" line and the stream ends; at
// shutdown the stream ends. An approver principal's stream also carries
// approval_parked and approval_decided (approvals_scale.go); no other
// follower's does. Any principal of the manifest may follow it
// (it reveals only the policy version, which /v1/health shows everyone);
// a uid that is no principal may not, so that local users the manifest
// does not name cannot take the followers' slots from those it does
// (TestEventsRefuseStrangers).
func (d *Daemon) handleEvents(w http.ResponseWriter, r *http.Request, peer Peer) {
	p := d.acquire()
	known, answered := d.eventsToken(w, r, peer, p.m)
	// Approval events go to an approver's own stream, never to a
	// delegation token's.
	approver := false
	if known && !answered && r.Header.Get("Authorization") == "" {
		name, _ := p.m.Identify(callerOf(peer))
		approver = p.m.IsApprover(name, peer.UID)
	}
	p.release()
	if answered {
		return
	}
	if !known {
		writeError(w, http.StatusForbidden, api.ErrForbidden, fmt.Sprintf("uid %d is not a principal of the manifest: it may not follow events", peer.UID))
		return
	}
	s, err := d.events.SubscribeAs(peer.UID, approver)
	if err == transport.ErrClosed {
		writeError(w, http.StatusServiceUnavailable, api.ErrUnavailable, "sluiced is shutting down")
		return
	}
	if err != nil {
		writeError(w, http.StatusTooManyRequests, api.ErrUnavailable, fmt.Sprintf("%v: at most %d per uid and %d in all; close one and retry", err, transport.MaxFollowersPerUID, transport.MaxFollowers))
		return
	}
	defer d.events.Unsubscribe(s)
	rc := http.NewResponseController(w)
	// A follower sends nothing more: the read deadline must not end it.
	_ = rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	send := func(ev api.DaemonEvent) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(d.cfg.WriteTimeout))
		return enc.Encode(ev) == nil && rc.Flush() == nil
	}
	p = d.acquire()
	version := p.m.Version
	p.release()
	if !send(api.DaemonEvent{Event: api.DaemonEventSubscribed, PolicyVersion: version}) {
		return
	}
	for {
		select {
		case ev, ok := <-s.C():
			if !ok {
				if d.events.Dropped(s) {
					send(api.DaemonEvent{Event: api.DaemonEventDropped, Message: "this follower fell behind and was dropped; subscribe again"})
				}
				return
			}
			if ev.Approval != nil && !d.stillApprover(peer) {
				continue // a reload took its approver rights away
			}
			if !send(ev) {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}
