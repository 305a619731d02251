package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/egress/netpolicy"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestHostOwns: the kernel's answer, in a network namespace of the test's
// own: loopback, an address on an interface (public-looking: it is no
// class's, only the host's), one added after the first question, a range
// owned through a local route with no interface numbered from it, and
// IPv6; an address with no route is an error (the caller dials nothing).
func TestHostOwns(t *testing.T) {
	if !testutil.InNetns(t) {
		return
	}
	testutil.AddAddr(t, netip.MustParsePrefix("1.2.3.5/32"))
	testutil.AddAddr(t, netip.MustParsePrefix("2600::5/128"))
	testutil.AddLocalRoute(t, netip.MustParsePrefix("5.6.7.0/24"))
	owns := func(s string) (bool, error) { return HostOwns(netip.MustParseAddr(s)) }
	for _, s := range []string{"127.0.0.1", "127.9.9.9", "::1", "1.2.3.5", "::ffff:1.2.3.5", "2600::5", "5.6.7.8", "5.6.7.255"} {
		if mine, err := owns(s); !mine || err != nil {
			t.Errorf("HostOwns(%s) = %v, %v; want true", s, mine, err)
		}
	}
	if mine, err := owns("1.2.3.6"); mine || err == nil {
		t.Errorf("HostOwns(1.2.3.6) with no route = %v, %v; want an error", mine, err)
	}
	testutil.AddAddr(t, netip.MustParsePrefix("1.2.3.6/32"))
	if mine, err := owns("1.2.3.6"); !mine || err != nil {
		t.Errorf("HostOwns(1.2.3.6) after it was added = %v, %v; want true", mine, err)
	}
}

// TestDialRefusesHostOwned: every dial egress makes — fetch by name, the
// daemon's pinned first request, a redirect hop, post, the proxy's
// CONNECT and plain HTTP — refuses an address the host owns before
// anything is sent, though the address is in no refused class and a
// server listens on 0.0.0.0 (docs/security.md "The third review"). An
// address added after the client was made is refused as well. 1.2.3.4
// stands in for a remote host (the client is told it is not the host's);
// 1.2.3.5 and 1.2.3.6 are the host's, on loopback of the test's own
// network namespace.
func TestDialRefusesHostOwned(t *testing.T) {
	if !testutil.InNetns(t) {
		return
	}
	testutil.AddAddr(t, netip.MustParsePrefix("1.2.3.4/32"))
	testutil.AddAddr(t, netip.MustParsePrefix("1.2.3.5/32"))
	var mu sync.Mutex
	var paths []string
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	testutil.Must(t, err)
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		if r.URL.Path == "/away" {
			http.Redirect(w, r, "http://owned.test:"+port+"/after-redirect", http.StatusFound)
			return
		}
		io.WriteString(w, "reached "+r.URL.Path)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), paths...)
	}

	remote := netip.MustParseAddr("1.2.3.4")
	c := testingClient{&Client{
		Resolver: newResolver("remote.test", "1.2.3.4", "owned.test", "1.2.3.5", "later.test", "1.2.3.6"),
		HostOwns: func(a netip.Addr) (bool, error) {
			if a == remote {
				return false, nil
			}
			return HostOwns(a)
		},
	}}
	hosts := []string{"remote.test:" + port, "owned.test:" + port, "later.test:" + port}
	p := mustPolicy(t, netpolicy.Config{Hosts: hosts, Schemes: []string{"http"},
		Webhooks: []string{"http://owned.test:" + port + "/hooks/**"}})
	ctx := context.Background()
	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, netpolicy.ErrEgressDenied) || !strings.Contains(err.Error(), "this host's own") {
			t.Errorf("%s: %v, want egress denied (the host's own address)", what, err)
		}
	}

	// The stand-in remote host is reached: the check refuses the host's
	// addresses only.
	if r, err := c.Fetch(ctx, p, FetchRequest{URL: "http://remote.test:" + port + "/remote"}); err != nil || string(r.Body) != "reached /remote" {
		t.Fatalf("fetch of the stand-in remote host: %v %+v", err, r)
	}
	_, err = c.Fetch(ctx, p, FetchRequest{URL: "http://owned.test:" + port + "/by-name"})
	denied("fetch by name", err)
	_, err = c.Fetch(ctx, p, FetchRequest{URL: "http://remote.test:" + port + "/pinned",
		Addr: netip.MustParseAddrPort("1.2.3.5:" + port)})
	denied("fetch pinned to the host's address (the daemon's first request)", err)
	_, err = c.Fetch(ctx, p, FetchRequest{URL: "http://remote.test:" + port + "/away"})
	denied("redirect hop", err)
	_, err = c.Post(ctx, p, PostRequest{URL: "http://owned.test:" + port + "/hooks/x", Body: []byte(`{}`)})
	denied("post", err)

	px := startProxy(t, &Proxy{Policy: p, Client: c.Client})
	for _, req := range []string{
		"CONNECT owned.test:" + port + " HTTP/1.1\r\nHost: owned.test:" + port + "\r\n\r\n",
		"GET http://owned.test:" + port + "/proxy-plain HTTP/1.1\r\nHost: owned.test:" + port + "\r\n\r\n",
	} {
		if code := px.raw(t, req); code != http.StatusForbidden {
			t.Errorf("proxy %q: %d, want 403", strings.SplitN(req, "\r", 2)[0], code)
		}
		if r := px.record(t); r.Reason != api.ReasonEgressDenied || !strings.Contains(r.Detail, "this host's own") {
			t.Errorf("proxy record: %+v", r)
		}
	}

	// Kept current: before 1.2.3.6 exists nothing routes it (upstream
	// error, nothing dialed); once it is the host's, it is refused.
	_, err = c.Fetch(ctx, p, FetchRequest{URL: "http://later.test:" + port + "/before"})
	if !errors.Is(err, ErrUpstream) {
		t.Errorf("fetch of an unrouted address: %v, want an upstream error", err)
	}
	testutil.AddAddr(t, netip.MustParsePrefix("1.2.3.6/32"))
	_, err = c.Fetch(ctx, p, FetchRequest{URL: "http://later.test:" + port + "/added-later"})
	denied("fetch of an address added after the client was made", err)
	if code := px.raw(t, "GET http://later.test:"+port+"/proxy-later HTTP/1.1\r\nHost: later.test\r\n\r\n"); code != http.StatusForbidden {
		t.Errorf("proxy to an address added later: %d, want 403", code)
	}
	px.record(t)

	if got := seen(); len(got) != 2 || got[0] != "/remote" || got[1] != "/away" {
		t.Errorf("the server saw %q, want only /remote and /away", got)
	}
}

// BenchmarkHostOwns: what the check adds to a dial. route is one
// RTM_GETROUTE (what HostOwns does per dial); addrdump is reading every
// interface address instead (net.InterfaceAddrs, an RTM_GETADDR dump),
// the alternative to asking per address. Compare ns/op:
//
//	go test -run XXX -bench HostOwns ./egress/
func BenchmarkHostOwns(b *testing.B) {
	for _, s := range []string{"127.0.0.1", "8.8.8.8", "::1"} {
		a := netip.MustParseAddr(s)
		b.Run("route/"+s, func(b *testing.B) {
			for b.Loop() {
				if _, err := HostOwns(a); err != nil && !strings.Contains(err.Error(), "unreachable") {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("addrdump", func(b *testing.B) {
		for b.Loop() {
			if _, err := net.InterfaceAddrs(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
