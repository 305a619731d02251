//go:build linux

package transport

import (
	"errors"
	"sync"

	"github.com/sluicehq/sluice/api"
)

// EventBuffer is how many events a follower may fall behind before it is
// dropped: a reader that stalls must never hold up a reload.
const EventBuffer = 16

// Hub fans daemon events (a reload's policy_loaded) out to the
// followers of GET /v1/events. Publishing never blocks: a follower whose
// buffer is full is dropped and told so.
type Hub struct {
	mu     sync.Mutex
	subs   map[*Follower]struct{}
	perUID map[uint32]int // followers by peer uid
	closed bool
}

// Follower is one subscription: its events come on C.
type Follower struct {
	ch      chan api.DaemonEvent // closed when dropped or at shutdown
	dropped bool                 // set under Hub.mu before ch closes
	uid     uint32
	// approver: the follower was an approver principal when it
	// subscribed; only such followers get PublishApprovers' events.
	approver bool
}

// C is the follower's events; it is closed when the follower is dropped,
// unsubscribed, or the hub closes.
func (s *Follower) C() <-chan api.DaemonEvent { return s.ch }

// Dropped says whether s ended because it fell EventBuffer events behind.
func (h *Hub) Dropped(s *Follower) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return s.dropped
}

// NewHub returns a hub with no followers.
func NewHub() *Hub { return &Hub{subs: map[*Follower]struct{}{}} }

// Followers are capped: a stream is a request without end, so the
// connection caps (which make room only by closing idle connections)
// would otherwise let a few uids hold every connection slot with streams.
const (
	MaxFollowersPerUID = 8
	MaxFollowers       = 64
)

// ErrTooManyFollowers: the follower caps are reached.
var ErrTooManyFollowers = errors.New("too many event streams are open")

// ErrClosed: the hub is closed (the daemon is shutting down).
var ErrClosed = errors.New("sluiced is shutting down")

// Subscribe adds a follower of peer uid: ErrClosed once the hub is
// closed, ErrTooManyFollowers at a cap.
func (h *Hub) Subscribe(uid uint32) (*Follower, error) { return h.SubscribeAs(uid, false) }

// SubscribeAs is Subscribe for a follower that is, or is not, an
// approver principal (PublishApprovers).
func (h *Hub) SubscribeAs(uid uint32, approver bool) (*Follower, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if len(h.subs) >= MaxFollowers || h.perUID[uid] >= MaxFollowersPerUID {
		return nil, ErrTooManyFollowers
	}
	if h.perUID == nil {
		h.perUID = map[uint32]int{}
	}
	h.perUID[uid]++
	s := &Follower{ch: make(chan api.DaemonEvent, EventBuffer), uid: uid, approver: approver}
	h.subs[s] = struct{}{}
	return s, nil
}

// Unsubscribe ends s, unless a drop or Close ended it already.
func (h *Hub) Unsubscribe(s *Follower) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		h.remove(s)
	}
}

// remove ends a follower: out of the hub and its uid's count, its channel
// closed; h.mu held.
func (h *Hub) remove(s *Follower) {
	delete(h.subs, s)
	close(s.ch)
	if h.perUID[s.uid]--; h.perUID[s.uid] <= 0 {
		delete(h.perUID, s.uid)
	}
}

// Publish hands ev to every follower without waiting for any.
func (h *Hub) Publish(ev api.DaemonEvent) { h.publish(ev, false) }

// PublishApprovers hands ev to the followers that subscribed as approver
// principals only (a parked call's principal, tool and task are theirs
// to see, as GET /v1/approvals is).
func (h *Hub) PublishApprovers(ev api.DaemonEvent) { h.publish(ev, true) }

func (h *Hub) publish(ev api.DaemonEvent, approvers bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if approvers && !s.approver {
			continue
		}
		select {
		case s.ch <- ev:
		default:
			s.dropped = true
			h.remove(s)
		}
	}
}

// Close ends every stream (shutdown): the server's Shutdown then finds
// those connections idle.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		h.remove(s)
	}
}
