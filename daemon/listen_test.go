//go:build linux

package daemon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// raiseFDLimit makes room for n more fds in this process.
func raiseFDLimit(t *testing.T, n uint64) {
	t.Helper()
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	lim.Cur = n
	lim.Max = max(lim.Max, n)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("raise RLIMIT_NOFILE to %d: %v", n, err)
	}
}

// peerClosed reports, without waiting, whether the daemon has closed c.
func peerClosed(t *testing.T, c net.Conn) bool {
	t.Helper()
	if rc, ok := c.(*rawConn); ok {
		c = rc.Conn
	}
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var rerr error
	buf := make([]byte, 1)
	if err := raw.Control(func(fd uintptr) {
		n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	}); err != nil {
		t.Fatal(err)
	}
	switch {
	case errors.Is(rerr, unix.EAGAIN):
		return false
	case rerr != nil:
		return true // ECONNRESET and the like
	}
	return n == 0
}

// rawConn is one connection spoken over by hand.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, socket string) *rawConn {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// roundTrip sends req and reads the response, failing the test after 5 s.
func (c *rawConn) roundTrip(req string) (*http.Response, []byte, error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, req); err != nil {
		return nil, nil, err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

const healthReq = "GET /v1/health HTTP/1.1\r\nHost: sluice\r\n\r\n"

func (c *rawConn) health(t *testing.T, what string) {
	t.Helper()
	resp, body, err := c.roundTrip(healthReq)
	if err != nil || resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"status":"ok"`)) {
		t.Fatalf("%s: health: %v %v %s", what, err, resp, body)
	}
}

// callBody is a read_file call that any of these tests' daemons allows.
const callBody = `{"tool":"read_file","args":{"path":"workspace/src/a.py"}}`

// beginCall sends a call's head with "Expect: 100-continue" and returns
// once the daemon asks for the body: its handler is then running, so the
// connection has a request in flight until finishCall.
func (c *rawConn) beginCall(t *testing.T) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	head := fmt.Sprintf("POST /v1/calls HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(callBody))
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("begin call: %v %v", err, resp)
	}
}

func (c *rawConn) finishCall(t *testing.T, what string) {
	t.Helper()
	resp, body, err := c.roundTrip(callBody)
	if err != nil || resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"ok":true`)) {
		t.Fatalf("%s: the call in flight did not complete: %v %v %s", what, err, resp, body)
	}
}

// dialAs connects to socket as another uid (testutil.DialAs), for raw
// requests.
func dialAs(t *testing.T, socket string, uid int) *rawConn {
	t.Helper()
	c, err := testutil.DialAs(socket, uid)(context.Background())
	if err != nil {
		t.Fatalf("dial as uid %d: %v", uid, err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// TestIdleFlood: 1,100 idle connections from one peer lock no one out: a
// fresh connection, from that uid or another, is served at once, whether
// the per-uid cap or the total cap is the one reached, and the
// connections closed to make room are exactly the longest idle.
func TestIdleFlood(t *testing.T) {
	testutil.RequireRoot(t) // to connect as another uid
	const flood = 1100
	raiseFDLimit(t, 3*flood+1024) // both ends of each, and the daemon's own
	for _, tc := range []struct {
		name   string
		perUID int
		keep   int // flood connections left open once the fresh one is in
		cap    string
	}{
		{name: "per-uid cap", perUID: 0 /* default */, keep: DefaultMaxConnsPerUID - 1, cap: "per_uid"},
		{name: "total cap", perUID: 2 * DefaultMaxConns, keep: DefaultMaxConns - 1, cap: "total"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := escapetest.Build(t)
			logs := &testutil.LockedBuffer{}
			h := start(t, fx.Manifest, securefs.ModeAuto, func(c *Config) {
				c.MaxConnsPerUID = tc.perUID
				c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			})
			conns := make([]net.Conn, flood)
			for i := range conns {
				c, err := net.Dial("unix", h.socket)
				if err != nil {
					t.Fatalf("dial %d: %v", i, err)
				}
				conns[i] = c
			}
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			// The 1,101st connection, through the Go client as an agent
			// would call. The deadline is generous for a busy 2-core
			// machine; the latency itself is logged.
			fresh := client.New(h.socket)
			defer fresh.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			begin := time.Now()
			_, err := fresh.Health(ctx)
			lat := time.Since(begin)
			if err != nil {
				t.Fatalf("a fresh connection after %d idle ones was not served in %v: %v", flood, lat, err)
			}
			t.Logf("GET /v1/health on connection %d: served in %v", flood+1, lat)

			var closed []int
			for i, c := range conns {
				if peerClosed(t, c) {
					closed = append(closed, i)
				}
			}
			// closed is ascending: it is the longest idle iff its last is want-1.
			if want := flood - tc.keep; len(closed) != want || closed[want-1] != want-1 {
				t.Fatalf("%d flood connections closed (%v…), want the %d longest idle", len(closed), closed[:min(len(closed), 5)], want)
			}
			// The youngest of the flood is still open, and served.
			last := &rawConn{Conn: conns[flood-1], r: bufio.NewReader(conns[flood-1])}
			last.health(t, "the newest flood connection")
			if !strings.Contains(logs.String(), `"msg":"closed an idle connection to admit a new one","cap":"`+tc.cap+`"`) {
				t.Fatalf("no debug log of an eviction at the %s", tc.cap)
			}
			// Another local user is served too.
			begin = time.Now()
			dialAs(t, h.socket, 4242).health(t, "uid 4242")
			t.Logf("GET /v1/health from uid 4242: served in %v", time.Since(begin))
			if tc.cap == "total" && !strings.Contains(logs.String(), `"new_uid":4242`) {
				t.Fatal("uid 4242's connection did not take the place of an idle one at the total cap")
			}
		})
	}
}

// TestBusyConnNotEvicted: a connection with a request in flight survives
// the newcomers that close idle ones; when every connection at the cap is
// busy, the newcomer is refused at once, and the busy ones still complete.
//
// The kernel hands connections to Accept in the order they connected, so
// the order of admission is the order of the dials below. Idle connections
// here never send a request: a connection that just had a response is
// marked idle by net/http only after the client has it, so its state
// would race with the next dial.
func TestBusyConnNotEvicted(t *testing.T) {
	fx := escapetest.Build(t)
	h := start(t, fx.Manifest, securefs.ModeAuto, func(c *Config) { c.MaxConnsPerUID = 3 })
	busy := dialRaw(t, h.socket)
	busy.beginCall(t)
	// 20 idle newcomers at a cap of 3, one of them busy: each from the
	// third on closes the longest idle, never the busy one.
	idle := make([]*rawConn, 20)
	for i := range idle {
		idle[i] = dialRaw(t, h.socket)
	}
	n1 := dialRaw(t, h.socket)
	n1.beginCall(t) // admitted, so everyone before it was; now busy too
	for i, c := range idle {
		if want := i < len(idle)-1; peerClosed(t, c) != want {
			t.Fatalf("idle connection %d: closed %t, want %t", i, !want, want)
		}
	}
	if peerClosed(t, busy) {
		t.Fatal("a connection with a request in flight was closed")
	}
	n2 := dialRaw(t, h.socket)
	n2.beginCall(t) // takes the place of the last idle one
	if !peerClosed(t, idle[len(idle)-1]) {
		t.Fatal("the last idle connection was not closed for n2")
	}
	// Every connection at the cap is busy: the next one is closed at once.
	refused := dialRaw(t, h.socket)
	refused.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := refused.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("over a cap of busy connections: read %d, %v; want the connection closed at once", n, err)
	}
	for i, c := range []*rawConn{busy, n1, n2} {
		c.finishCall(t, fmt.Sprintf("busy connection %d", i))
	}
}
