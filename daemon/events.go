//go:build linux

package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/api"
)

// eventBuffer is how many events a subscriber may fall behind before it is
// dropped: a reader that stalls must never hold up a reload.
const eventBuffer = 16

// eventHub fans daemon events (a reload's policy_loaded) out to the
// followers of GET /v1/events. Publishing never blocks: a subscriber whose
// buffer is full is dropped and told so.
type eventHub struct {
	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	perUID map[uint32]int // followers by peer uid
	closed bool
}

type subscriber struct {
	ch      chan api.DaemonEvent // closed when dropped or at shutdown
	dropped bool                 // set under eventHub.mu before ch closes
	uid     uint32
}

func newEventHub() *eventHub { return &eventHub{subs: map[*subscriber]struct{}{}} }

// subscribe adds a follower of peer uid: errShutdown once the hub is
// closed, errTooManyFollowers at a cap.
// Followers are capped: a stream is a request without end, so the
// connection caps (which make room only by closing idle connections)
// would otherwise let a few uids hold every connection slot with streams.
const (
	maxFollowersPerUID = 8
	maxFollowers       = 64
)

// errTooManyFollowers: the follower caps are reached.
var errTooManyFollowers = errors.New("too many event streams are open")

func (h *eventHub) subscribe(uid uint32) (*subscriber, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errShutdown
	}
	if len(h.subs) >= maxFollowers || h.perUID[uid] >= maxFollowersPerUID {
		return nil, errTooManyFollowers
	}
	if h.perUID == nil {
		h.perUID = map[uint32]int{}
	}
	h.perUID[uid]++
	s := &subscriber{ch: make(chan api.DaemonEvent, eventBuffer), uid: uid}
	h.subs[s] = struct{}{}
	return s, nil
}

func (h *eventHub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		h.remove(s)
	}
}

// remove ends a follower: out of the hub and its uid's count, its channel
// closed; h.mu held.
func (h *eventHub) remove(s *subscriber) {
	delete(h.subs, s)
	close(s.ch)
	if h.perUID[s.uid]--; h.perUID[s.uid] <= 0 {
		delete(h.perUID, s.uid)
	}
}

// publish hands ev to every follower without waiting for any.
func (h *eventHub) publish(ev api.DaemonEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.ch <- ev:
		default:
			s.dropped = true
			h.remove(s)
		}
	}
}

// close ends every stream (shutdown): the server's Shutdown then finds
// those connections idle.
func (h *eventHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		h.remove(s)
	}
}

// handleEvents is GET /v1/events: an NDJSON stream, one event a line,
// flushed as it happens. The first line, "subscribed", carries the policy
// version in force once the follower is subscribed, so a reload between a
// client's GET /v1/tools and its subscription is not missed; then one
// "policy_loaded" per successful reload. A follower that falls
// eventBuffer events behind gets a "dropped" line and the stream ends; at
// shutdown the stream ends. Any principal of the manifest may follow it
// (it reveals only the policy version, which /v1/health shows everyone);
// a uid that is no principal may not, so that local users the manifest
// does not name cannot take the followers' slots from those it does
// (TestEventsRefuseStrangers).
func (d *Daemon) handleEvents(w http.ResponseWriter, r *http.Request, peer Peer) {
	p := d.acquire()
	_, known := p.m.Identify(peer.UID, peer.GID)
	p.release()
	if !known {
		writeError(w, http.StatusForbidden, api.ErrForbidden, fmt.Sprintf("uid %d is not a principal of the manifest: it may not follow events", peer.UID))
		return
	}
	s, err := d.events.subscribe(peer.UID)
	if err == errShutdown {
		writeError(w, http.StatusServiceUnavailable, api.ErrUnavailable, "sluiced is shutting down")
		return
	}
	if err != nil {
		writeError(w, http.StatusTooManyRequests, api.ErrUnavailable, fmt.Sprintf("%v: at most %d per uid and %d in all; close one and retry", err, maxFollowersPerUID, maxFollowers))
		return
	}
	defer d.events.unsubscribe(s)
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
		case ev, ok := <-s.ch:
			if !ok {
				d.events.mu.Lock()
				dropped := s.dropped
				d.events.mu.Unlock()
				if dropped {
					send(api.DaemonEvent{Event: api.DaemonEventDropped, Message: "this follower fell behind and was dropped; subscribe again"})
				}
				return
			}
			if !send(ev) {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}
