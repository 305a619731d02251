//go:build linux

package transport

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeConn is a connection that only records being closed.
type fakeConn struct {
	net.Conn
	name   string
	closed atomic.Bool
}

func (c *fakeConn) Close() error { c.closed.Store(true); return nil }

// TestConnTable: at the per-uid cap the uid's own connection idle the
// longest goes; at the total cap, anyone's; busy connections never go, and
// with every connection at the cap busy the newcomer is refused.
func TestConnTable(t *testing.T) {
	tab := NewConns(4, 2, slog.New(slog.NewTextHandler(io.Discard, nil)))
	conns := map[string]*fakeConn{}
	tracked := map[string]*trackedConn{}
	open := func(name string, uid uint32) bool {
		t.Helper()
		fc := &fakeConn{name: name}
		conns[name] = fc
		tc := tab.admit(fc, Peer{UID: uid}, true)
		if tc == nil {
			if !fc.closed.Load() {
				t.Fatalf("%s refused but not closed", name)
			}
			return false
		}
		tracked[name] = tc
		tab.ConnState(tc, http.StateNew)
		return true
	}
	state := func(name string, s http.ConnState) { tab.ConnState(tracked[name], s) }
	wantClosed := func(names ...string) {
		t.Helper()
		var got []string
		for _, n := range []string{"a1", "a2", "a3", "a4", "a5", "b1", "b2", "c1", "c2", "c3", "c4"} {
			if c := conns[n]; c != nil && c.closed.Load() {
				got = append(got, n)
			}
		}
		if strings.Join(got, " ") != strings.Join(names, " ") {
			t.Fatalf("closed %v, want %v", got, names)
		}
	}
	wantOpen := func(n int) {
		t.Helper()
		if got, _, _ := tab.Stats(); got != n {
			t.Fatalf("%d open, want %d", got, n)
		}
	}

	// uid 1's cap is 2: its longest idle goes first.
	open("a1", 1)
	open("a2", 1)
	open("a3", 1)
	wantClosed("a1")
	// a2 busy: a3 goes instead, though a2 is older.
	state("a2", http.StateActive)
	open("a4", 1)
	wantClosed("a1", "a3")
	// both busy: the newcomer is refused, nothing else closed.
	state("a4", http.StateActive)
	if open("a5", 1) {
		t.Fatal("a5 admitted over a cap of busy connections")
	}
	wantClosed("a1", "a3", "a5")
	wantOpen(2)

	// The total cap (4): the oldest idle of anyone goes, busy ones stay.
	open("b1", 2)
	open("b2", 2)
	state("a2", http.StateIdle) // idle again: now idle more recently than b1 and b2
	open("c1", 3)
	wantClosed("a1", "a3", "a5", "b1")
	open("c2", 3)
	wantClosed("a1", "a3", "a5", "b1", "b2")
	wantOpen(4) // a2 a4 c1 c2
	// uid 3 is at its cap: its own c1 goes, not a2, which has been idle longer.
	open("c3", 3)
	wantClosed("a1", "a3", "a5", "b1", "b2", "c1")

	// Closed connections free their places, however they close.
	tracked["a4"].Close()
	state("c2", http.StateClosed)
	wantOpen(2) // a2 c3
	if n := len(tab.uids); n != 2 {
		t.Fatalf("%d uids tracked, want 2 (1 and 3)", n)
	}
	// All four busy: the total cap refuses the fifth.
	open("c4", 3)
	open("b1", 2)
	for _, n := range []string{"a2", "c3", "c4", "b1"} {
		state(n, http.StateActive)
	}
	if open("b2", 2) {
		t.Fatal("admitted over a total cap of busy connections")
	}
	if _, evicted, refused := tab.Stats(); evicted != 5 || refused != 2 {
		t.Fatalf("evicted %d refused %d, want 5 and 2", evicted, refused)
	}
	for _, tc := range tracked {
		tc.Close()
	}
	wantOpen(0)
	if len(tab.uids) != 0 || tab.idle.Len() != 0 {
		t.Fatalf("left in the table: %d uids, %d idle", len(tab.uids), tab.idle.Len())
	}
}
