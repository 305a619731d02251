//go:build linux

package transport

import (
	"testing"

	"github.com/sluicehq/sluice/api"
)

// TestEventHubDropsSlowFollower: publish never blocks. A follower that
// reads nothing is dropped once EventBuffer events are queued for it, and
// its stream then says "dropped"; the others still get every event.
func TestEventHubDropsSlowFollower(t *testing.T) {
	h := NewHub()
	slow, _ := h.Subscribe(1)
	fast, _ := h.Subscribe(2)
	for i := range EventBuffer + 1 {
		h.Publish(api.DaemonEvent{Event: api.DaemonEventPolicyLoaded})
		select {
		case <-fast.ch:
		default:
			t.Fatalf("event %d did not reach the follower that reads", i)
		}
	}
	h.mu.Lock()
	_, still := h.subs[slow]
	dropped := slow.dropped
	h.mu.Unlock()
	if still || !dropped {
		t.Fatalf("the slow follower was not dropped (subscribed %t, dropped %t)", still, dropped)
	}
	n := 0
	for range slow.ch { // closed after what it had queued
		n++
	}
	if n != EventBuffer {
		t.Fatalf("the slow follower had %d events queued, want %d", n, EventBuffer)
	}
	h.Unsubscribe(slow) // idempotent after a drop
	h.Close()
	if _, ok := <-fast.ch; ok {
		t.Fatal("close left a stream open")
	}
	if s, err := h.Subscribe(1); s != nil || err != ErrClosed {
		t.Fatal("subscribed after close")
	}
}

// TestEventFollowersCapped: a stream has no end, and the connection caps
// make room only by closing idle connections, so followers are capped per
// uid and in all; a dropped or ended follower gives its place back.
func TestEventFollowersCapped(t *testing.T) {
	h := NewHub()
	var mine []*Follower
	for range MaxFollowersPerUID {
		s, err := h.Subscribe(7)
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, s)
	}
	if _, err := h.Subscribe(7); err != ErrTooManyFollowers {
		t.Fatalf("follower %d of one uid: %v, want ErrTooManyFollowers", MaxFollowersPerUID+1, err)
	}
	// A drop (by publish) and an unsubscribe each free a place.
	for range EventBuffer + 1 {
		h.Publish(api.DaemonEvent{Event: api.DaemonEventPolicyLoaded})
	}
	for _, s := range mine {
		h.Unsubscribe(s)
	}
	if got := h.perUID[7]; got != 0 {
		t.Fatalf("uid 7 still counts %d followers after all were dropped", got)
	}
	for uid := uint32(100); len(h.subs) < MaxFollowers; uid++ {
		if _, err := h.Subscribe(uid); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.Subscribe(99); err != ErrTooManyFollowers {
		t.Fatalf("follower %d in all: %v, want ErrTooManyFollowers", MaxFollowers+1, err)
	}
	h.Close()
	if len(h.perUID) != 0 {
		t.Fatalf("counts left after close: %v", h.perUID)
	}
}
