package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/sluicehq/sluice/egress/netpolicy"
)

// Resolver looks a name up once. *net.Resolver implements it; tests inject
// a fake that maps names like "api.test" to 127.0.0.1.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Client performs fetch, post and proxied connections. The zero value uses
// the system resolver and the system's root CAs. A Client holds no
// per-request state and is safe for concurrent use.
type Client struct {
	// Resolver; nil means net.DefaultResolver.
	Resolver Resolver
	// RootCAs overrides the system roots (tests: a test CA).
	RootCAs *x509.CertPool
	// DialTimeout bounds one TCP connect; 0 means 10s (the request's
	// timeout bounds it too).
	DialTimeout time.Duration
	// HostOwns says whether an address is the host's own; nil means the
	// package's HostOwns (the kernel's routing). Tests inject one that
	// disowns an address they use as a stand-in for a remote host.
	HostOwns func(netip.Addr) (bool, error)
}

var defaultClient = &Client{}

func (c *Client) resolver() Resolver {
	if c.Resolver != nil {
		return c.Resolver
	}
	return net.DefaultResolver
}

// Resolve looks t's host up ONCE and checks every address (c.CheckAddrs);
// the returned address is the resource: it is what gets dialed, never the
// name again. An IP-literal target (only possible when a hosts entry lists
// that literal) is checked the same way.
func (c *Client) Resolve(ctx context.Context, p *netpolicy.Policy, t *netpolicy.Target) (netip.AddrPort, error) {
	addrs, err := c.Lookup(ctx, t)
	if err != nil {
		return netip.AddrPort{}, err
	}
	a, err := c.CheckAddrs(addrs, p.InsecureAllowPrivate())
	if err != nil {
		return netip.AddrPort{}, checkErr(t, err)
	}
	return netip.AddrPortFrom(a, t.Port), nil
}

// CheckAddrs is the address check of every dial egress makes of an
// address it looked up itself — each redirect hop, and the proxy's
// CONNECT and plain-HTTP requests: netpolicy.CheckAddrs's classes, then
// the host's own addresses (CheckRoutes). Fetch's and post's first
// request goes to the address the daemon's decision classified, and is
// asked about by CheckRoutes alone.
func (c *Client) CheckAddrs(addrs []netip.Addr, allowPrivate bool) (netip.Addr, error) {
	a, err := netpolicy.CheckAddrs(addrs, allowPrivate)
	if err != nil {
		return a, err
	}
	return a, c.CheckRoutes(addrs, allowPrivate)
}

// CheckRoutes refuses an address of one of the host's interfaces, asked
// of the kernel's routes at the time of the dial: such an address reaches
// whatever listens on 0.0.0.0 there, whatever its class — a public
// address, or one from a range nothing routes on the internet but a lab
// or cloud network numbers its hosts from (docs/security.md "The third
// review"). That answer is the machine's, not the URL's, so no decision
// made earlier (nor replay) can hold it: it runs before every dial. Every
// address given is asked about. insecure_allow_private (allowPrivate)
// admits the host's own addresses, as it admits loopback. A failure to
// ask the kernel is an UpstreamError: nothing is dialed.
func (c *Client) CheckRoutes(addrs []netip.Addr, allowPrivate bool) error {
	if allowPrivate {
		return nil
	}
	owns := c.HostOwns
	if owns == nil {
		owns = HostOwns
	}
	for _, x := range addrs {
		mine, err := owns(x)
		if err != nil {
			return &UpstreamError{Op: "route", Err: err}
		}
		if mine {
			return denied("address %s is this host's own", x.Unmap())
		}
	}
	return nil
}

// checkErr names the host in a refusal; an upstream error passes as is.
func checkErr(t *netpolicy.Target, err error) error {
	if errors.Is(err, netpolicy.ErrEgressDenied) {
		return denied("%s: %v", t.Host, detailOf(err))
	}
	return err
}

// Lookup looks t's host up once and returns the whole answer, unchecked
// (an IP-literal target is its own answer). The daemon records the answer
// and decides on it (netpolicy.CheckAddrs) before anything is sent, as it
// decides on a path the kernel resolved; Fetch and Post then send the
// first request to the address the decision checked.
func (c *Client) Lookup(ctx context.Context, t *netpolicy.Target) ([]netip.Addr, error) {
	if t.IP.IsValid() {
		return []netip.Addr{t.IP}, nil
	}
	addrs, err := c.resolver().LookupNetIP(ctx, "ip", t.Host)
	if err != nil {
		if ctx.Err() != nil {
			return nil, upstreamCtx(ctx, "resolve", err)
		}
		return nil, &UpstreamError{Op: "resolve", Err: err}
	}
	// Go's resolver answers an IPv4 address in its IPv4-mapped form
	// (::ffff:a.b.c.d); dialing that needs a dual-stack IPv6 socket. The
	// address is the IPv4 one (CheckAddrs judges mapped forms by it too).
	for i, a := range addrs {
		addrs[i] = a.Unmap()
	}
	return addrs, nil
}

// pinnedDialer dials only addresses that were checked: the transport asks
// for "host:port" and gets a connection to the address Resolve returned
// for that host:port, with no second lookup (a DNS answer that changes
// between check and use — rebinding — is never consulted). A host:port
// nobody pinned is refused.
type pinnedDialer struct {
	mu   sync.Mutex
	pins map[string]netip.AddrPort
	d    net.Dialer
}

func newPinnedDialer(timeout time.Duration) *pinnedDialer {
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	// KeepAlive -1 and no Resolver: the address is already numeric.
	return &pinnedDialer{pins: map[string]netip.AddrPort{}, d: net.Dialer{Timeout: timeout}}
}

func (pd *pinnedDialer) pin(hostPort string, ap netip.AddrPort) {
	pd.mu.Lock()
	pd.pins[hostPort] = ap
	pd.mu.Unlock()
}

func (pd *pinnedDialer) DialContext(ctx context.Context, network, hostPort string) (net.Conn, error) {
	pd.mu.Lock()
	ap, ok := pd.pins[hostPort]
	pd.mu.Unlock()
	if !ok {
		return nil, denied("dial to %s that was never authorized", hostPort)
	}
	return pd.dial(ctx, ap)
}

func (pd *pinnedDialer) dial(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	network := "tcp4"
	if ap.Addr().Is6() {
		network = "tcp6"
	}
	return pd.d.DialContext(ctx, network, ap.String())
}

// transport is a one-call http.Transport over a pinned dialer: Proxy is
// nil so HTTP_PROXY/HTTPS_PROXY in sluiced's environment are ignored (an
// attacker-influenced environment cannot route fetches elsewhere), and TLS
// is verified against the URL's host NAME (the transport sets ServerName
// from the request's host, not from the dialed address), so a pinned
// address that serves another name's certificate fails as upstream_error.
func (c *Client) transport(pd *pinnedDialer) *http.Transport {
	return &http.Transport{
		Proxy:       nil,
		DialContext: pd.DialContext,
		TLSClientConfig: &tls.Config{
			RootCAs:    c.RootCAs,
			MinVersion: tls.VersionTLS12,
		},
		TLSHandshakeTimeout:    10 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		DisableKeepAlives:      false,
		MaxIdleConns:           4,
		IdleConnTimeout:        5 * time.Second,
		ForceAttemptHTTP2:      false,
	}
}

// upstreamCtx classifies a failure after ctx ended: a cancelled parent is
// passed through (the daemon reports cancelled/shutdown), the call's own
// deadline is a timeout.
func upstreamCtx(ctx context.Context, op string, err error) error {
	if ctx.Err() == context.DeadlineExceeded {
		return &UpstreamError{Op: "timeout", Err: context.DeadlineExceeded}
	}
	if ctx.Err() != nil {
		return &UpstreamError{Op: op, Err: ctx.Err()}
	}
	return &UpstreamError{Op: op, Err: err}
}
