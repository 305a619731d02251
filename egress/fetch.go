package egress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/egress/netpolicy"
)

// Hop records one request of a chain (the first URL, then each redirect).
type Hop struct {
	// URL is the hop's URL as asked: a refused redirect's is its Location
	// resolved, at most the response header's size. Whoever records it
	// bounds it and keeps its query by digest (redact.URL).
	URL    string
	Rule   netpolicy.Rule
	Addr   netip.AddrPort // address dialed; zero when the hop was refused before dialing
	Status int            // 0 when no response arrived
}

// Result is what a fetch or post returned. It is non-nil whenever a
// request was attempted, even alongside an error, so the audit can record
// the hops and the addresses dialed.
type Result struct {
	Status      int
	ContentType string
	Body        []byte // at most MaxBytes; never recorded in the audit
	Truncated   bool   // the body was longer than MaxBytes
	Bytes       int64  // len(Body)
	URL         string // final URL
	Addr        netip.AddrPort
	Rule        netpolicy.Rule
	Hops        []Hop
	Duration    time.Duration
	// Redacted counts the echoes of a credential's value replaced by
	// CredentialMark in the body, the content type and the URLs.
	Redacted int
}

// Fetch performs a fetch with the default Client.
func Fetch(ctx context.Context, p *netpolicy.Policy, r *netpolicy.Request, addr netip.Addr) (*Result, error) {
	return defaultClient.Fetch(ctx, p, r, addr)
}

// Fetch is FetchWith no credential values: a request to a host the
// policy names a credential for is refused.
func (c *Client) Fetch(ctx context.Context, p *netpolicy.Policy, r *netpolicy.Request, addr netip.Addr) (*Result, error) {
	return c.FetchWith(ctx, p, r, addr, nil)
}

// Post is PostWith no credential values.
func (c *Client) Post(ctx context.Context, p *netpolicy.Policy, r *netpolicy.Request, addr netip.Addr, body []byte) (*Result, error) {
	return c.PostWith(ctx, p, r, addr, body, nil)
}

// Post performs a post with the default Client.
func Post(ctx context.Context, p *netpolicy.Policy, r *netpolicy.Request, addr netip.Addr, body []byte) (*Result, error) {
	return defaultClient.Post(ctx, p, r, addr, body)
}

// credentialHeaders are dropped when a redirect changes scheme, host or
// port, as Go's http.Client does: a token allowed for api.example must not
// follow a redirect to another allowed host.
var credentialHeaders = []string{"Authorization", "Cookie", "Cookie2"}

// FetchWith performs the GET or HEAD that r is (netpolicy.Policy.AuthorizeFetch
// made it: its URL, method and headers are not checked again), its first
// request sent to addr, the address the caller's decision checked among
// the answer of its host's one lookup (Lookup): no lookup is made for it,
// so an answer that changed since is never consulted, and only the host's
// current routes are asked about it (CheckRoutes) before it is dialed.
// Every redirect hop's Location is parsed and authorized by p (hosts,
// schemes, ports), its name resolved once and checked (Resolve), and the
// request sent over a connection to exactly that address, so a hop to an
// undeclared host is refused before anything is sent there. The body is
// read up to MaxBytes+1 and never buffered beyond that.
//
// cr are the tool's credential values: each hop to a host the policy
// names a credential for carries its header (a redirect back to it
// too), no other hop does, a redirect whose Location echoes a value is
// refused, and every value echoed in the body, the content type, the
// URLs or an error's text is replaced by CredentialMark (docs/egress.md,
// "Credentials").
func (c *Client) FetchWith(ctx context.Context, p *netpolicy.Policy, r *netpolicy.Request, addr netip.Addr, cr *Credentials) (*Result, error) {
	res, err := c.fetch(ctx, p, r, addr, cr)
	return cr.scrubResult(res, err)
}

func (c *Client) fetch(ctx context.Context, p *netpolicy.Policy, r *netpolicy.Request, addr netip.Addr, cr *Credentials) (*Result, error) {
	if r == nil || r.Target() == nil || r.Method() == http.MethodPost {
		return nil, denied("fetch of a request not authorized as one")
	}
	method := r.Method()
	hdr := http.Header{}
	for k, v := range r.Headers() {
		hdr[k] = []string{v}
	}
	ctx, cancel := context.WithTimeout(ctx, p.Timeout())
	defer cancel()
	start := time.Now()
	pd := newPinnedDialer(c.DialTimeout)
	tr := c.transport(pd)
	defer tr.CloseIdleConnections()

	res := &Result{}
	t, rule := r.Target(), r.Rule()
	var prev *netpolicy.Target
	for hop := 0; ; hop++ {
		var ap netip.AddrPort
		var err error
		if hop == 0 {
			ap, err = c.decided(p, t, addr)
		} else {
			ap, err = c.Resolve(ctx, p, t)
		}
		if prev != nil && (prev.Scheme != t.Scheme || prev.Host != t.Host || prev.Port != t.Port) {
			for _, h := range credentialHeaders {
				hdr.Del(h)
			}
		}
		res.Hops = append(res.Hops, Hop{URL: t.String(), Rule: rule})
		res.URL, res.Rule = t.String(), rule
		var resp *http.Response
		var sent http.Header
		if err == nil {
			sent, err = cr.add(p, t, hdr)
		}
		if err == nil {
			resp, err = c.send(ctx, pd, tr, t, ap, method, sent, nil)
			res.Hops[hop].Addr = ap
		}
		res.Addr = res.Hops[hop].Addr
		if err != nil {
			res.Duration = time.Since(start)
			return res, err
		}
		res.Hops[hop].Status = resp.StatusCode
		loc := resp.Header.Get("Location")
		if isRedirect(resp.StatusCode) && loc != "" {
			resp.Body.Close()
			if hop >= p.MaxRedirects() {
				res.Duration = time.Since(start)
				return res, denied("more than max_redirects (%d) redirects", p.MaxRedirects())
			}
			u, err := t.URL.Parse(loc)
			if err != nil {
				return res, denied("redirect %d: Location does not parse", hop+1)
			}
			// A new untrusted URL: parsed and authorized on its own.
			next := u.String()
			if s := cr.scrubber(); s != nil && (s.Contains(loc) || s.Contains(next)) {
				// Following it would carry the value wherever it points.
				res.Hops = append(res.Hops, Hop{URL: next})
				res.Duration = time.Since(start)
				return res, denied("redirect %d: Location echoes a credential", hop+1)
			}
			prev = t
			if t, rule, err = p.AuthorizeURL(next); err != nil {
				res.Hops = append(res.Hops, Hop{URL: next})
				res.Duration = time.Since(start)
				return res, denied("redirect %d: %v", hop+1, detailOf(err))
			}
			continue
		}
		err = readBody(ctx, res, resp, p.MaxBytes(), cr.scrubber())
		res.Duration = time.Since(start)
		return res, err
	}
}

// Post sends body, a JSON value (the args decoder's check) within
// max_request_bytes (the decision's), to the webhook URL r is
// (netpolicy.Policy.AuthorizePost made it), at addr, as Fetch sends its
// first request. Redirects are not followed: the body goes to the matched
// URL or nowhere; a 3xx is returned as the result. cr adds and scrubs
// as for FetchWith.
func (c *Client) PostWith(ctx context.Context, p *netpolicy.Policy, r *netpolicy.Request, addr netip.Addr, body []byte, cr *Credentials) (*Result, error) {
	res, err := c.post(ctx, p, r, addr, body, cr)
	return cr.scrubResult(res, err)
}

func (c *Client) post(ctx context.Context, p *netpolicy.Policy, r *netpolicy.Request, addr netip.Addr, body []byte, cr *Credentials) (*Result, error) {
	if r == nil || r.Target() == nil || r.Method() != http.MethodPost {
		return nil, denied("post of a request not authorized as one")
	}
	t, rule := r.Target(), r.Rule()
	res := &Result{URL: t.String(), Rule: rule, Hops: []Hop{{URL: t.String(), Rule: rule}}}
	start := time.Now()
	ap, err := c.decided(p, t, addr)
	if err != nil {
		res.Duration = time.Since(start)
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.Timeout())
	defer cancel()
	pd := newPinnedDialer(c.DialTimeout)
	tr := c.transport(pd)
	defer tr.CloseIdleConnections()
	hdr, err := cr.add(p, t, http.Header{"Content-Type": {"application/json"}})
	if err != nil {
		res.Duration = time.Since(start)
		return res, err
	}
	resp, err := c.send(ctx, pd, tr, t, ap, http.MethodPost, hdr, body)
	res.Addr, res.Hops[0].Addr = ap, ap
	if err != nil {
		res.Duration = time.Since(start)
		return res, err
	}
	res.Hops[0].Status = resp.StatusCode
	err = readBody(ctx, res, resp, p.MaxBytes(), cr.scrubber())
	res.Duration = time.Since(start)
	return res, err
}

// BodyDigest is what the audit records of a post body: "sha256:<hex>" and
// its length, never the body.
func BodyDigest(body []byte) (string, int) {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:]), len(body)
}

// decided is the first request's address: addr, which the caller's
// decision checked (netpolicy.CheckAddrs over its host's one lookup), at
// the URL's port, once the host's routes say now that it is not one of
// the host's own (CheckRoutes: that answer is the machine's, so no
// decision made earlier can hold it). No lookup is made: an address the
// caller did not decide on is never dialed.
func (c *Client) decided(p *netpolicy.Policy, t *netpolicy.Target, addr netip.Addr) (netip.AddrPort, error) {
	if !addr.IsValid() {
		return netip.AddrPort{}, denied("%s: no decided address", t.Host)
	}
	if err := c.CheckRoutes([]netip.Addr{addr}, p.InsecureAllowPrivate()); err != nil {
		return netip.AddrPort{}, checkErr(t, err)
	}
	return netip.AddrPortFrom(addr.Unmap(), t.Port), nil
}

// send pins t's host:port to ap, a checked address, and performs one
// request.
func (c *Client) send(ctx context.Context, pd *pinnedDialer, tr *http.Transport, t *netpolicy.Target,
	ap netip.AddrPort, method string, hdr http.Header, body []byte) (*http.Response, error) {
	pd.pin(t.HostPort(), ap)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, t.URL.String(), rd)
	if err != nil {
		return nil, denied("request: %v", err)
	}
	hreq.Header = hdr.Clone()
	if hreq.Header.Get("User-Agent") == "" {
		hreq.Header.Set("User-Agent", "sluice-egress")
	}
	resp, err := tr.RoundTrip(hreq)
	if err != nil {
		return nil, classify(ctx, err)
	}
	return resp, nil
}

func classify(ctx context.Context, err error) error {
	var de *netpolicy.DeniedError
	if errors.As(err, &de) {
		return de
	}
	if ctx.Err() != nil {
		return upstreamCtx(ctx, "request", err)
	}
	var ue *UpstreamError
	if errors.As(err, &ue) {
		return ue
	}
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var rh tls.RecordHeaderError
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &rh) {
		return &UpstreamError{Op: "tls", Err: err}
	}
	return &UpstreamError{Op: "request", Err: err}
}

// readBody reads at most max+1 bytes, keeps max, and closes the body
// without draining it: a 1 GiB answer costs max+1 bytes of memory and the
// connection is dropped. With a scrubber, what is read is the body with
// every credential value replaced, as it streams (credscrub.go).
func readBody(ctx context.Context, res *Result, resp *http.Response, max int64, s *scrubber) error {
	if s != nil {
		resp.Body = s.reader(resp.Body, &res.Redacted)
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	res.ContentType = resp.Header.Get("Content-Type")
	initial := max + 1
	if initial > 32<<10 {
		initial = 32 << 10
	}
	if cl := resp.ContentLength; cl >= 0 && cl+1 < initial {
		initial = cl + 1
	}
	buf := make([]byte, 0, initial)
	for int64(len(buf)) <= max {
		if len(buf) == cap(buf) {
			n := int64(cap(buf)) * 2
			if n > max+1 {
				n = max + 1
			}
			nb := make([]byte, len(buf), n)
			copy(nb, buf)
			buf = nb
		}
		n, err := resp.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			// net/http may report a body cut short by the deadline as a
			// clean EOF (observed with TLS, Go 1.26): a body that ended
			// after the call's context did is a timeout, not a result.
			if ctx.Err() != nil {
				res.Body = nil
				return upstreamCtx(ctx, "read", err)
			}
			break
		}
		if err != nil {
			res.Body = nil
			return upstreamCtx(ctx, "read", err)
		}
	}
	if int64(len(buf)) > max {
		buf, res.Truncated = buf[:max], true
	}
	res.Body, res.Bytes = buf, int64(len(buf))
	return nil
}

func isRedirect(code int) bool {
	switch code {
	case 301, 302, 303, 307, 308:
		return true
	}
	return false
}
