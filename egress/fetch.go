package egress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/egress/netpolicy"
)

// FetchRequest is the fetch operation's args.
type FetchRequest struct {
	URL     string
	Method  string // "GET" (default when empty) or "HEAD"
	Headers map[string]string
	// Addr, when valid, is the first request's address: the caller
	// resolved the name (Client.Lookup) and decided on the answer. It is
	// checked again (CheckAddrs) and dialed; no lookup is made for it.
	// Redirects are resolved here, each once.
	Addr netip.AddrPort
}

// PostRequest is the post operation's args: a JSON body to a webhook.
type PostRequest struct {
	URL  string
	Body json.RawMessage
	// Addr is as FetchRequest's.
	Addr netip.AddrPort
}

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
}

// Fetch performs a fetch with the default Client.
func Fetch(ctx context.Context, p *netpolicy.Policy, req FetchRequest) (*Result, error) {
	return defaultClient.Fetch(ctx, p, req)
}

// Post performs a post with the default Client.
func Post(ctx context.Context, p *netpolicy.Policy, req PostRequest) (*Result, error) {
	return defaultClient.Post(ctx, p, req)
}

// credentialHeaders are dropped when a redirect changes scheme, host or
// port, as Go's http.Client does: a token allowed for api.example must not
// follow a redirect to another allowed host.
var credentialHeaders = []string{"Authorization", "Cookie", "Cookie2"}

// Fetch performs a GET or HEAD: every hop's URL is parsed and authorized
// by p (hosts, schemes, ports), its name resolved once and checked, and
// the request sent over a connection to exactly that address. A redirect
// is followed only after its Location passed the same checks, so a hop to
// an undeclared host is refused before anything is sent there. The body
// is read up to MaxBytes+1 and never buffered beyond that.
func (c *Client) Fetch(ctx context.Context, p *netpolicy.Policy, req FetchRequest) (*Result, error) {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	if method != http.MethodGet && method != http.MethodHead {
		return nil, errors.Join(netpolicy.ErrInvalidRequest, errors.New("method must be GET or HEAD"))
	}
	checked, err := p.CheckHeaders(req.Headers)
	if err != nil {
		return nil, err
	}
	hdr := http.Header{}
	for k, v := range checked {
		hdr[k] = []string{v}
	}
	ctx, cancel := context.WithTimeout(ctx, p.Timeout())
	defer cancel()
	start := time.Now()
	pd := newPinnedDialer(c.DialTimeout)
	tr := c.transport(pd)
	defer tr.CloseIdleConnections()

	res := &Result{}
	next := req.URL
	var prev *netpolicy.Target
	for hop := 0; ; hop++ {
		t, rule, err := p.AuthorizeURL(next)
		if err != nil {
			if hop > 0 {
				res.Hops = append(res.Hops, Hop{URL: next})
				return res, denied("redirect %d: %v", hop, detailOf(err))
			}
			return nil, err
		}
		if prev != nil && (prev.Scheme != t.Scheme || prev.Host != t.Host || prev.Port != t.Port) {
			for _, h := range credentialHeaders {
				hdr.Del(h)
			}
		}
		res.Hops = append(res.Hops, Hop{URL: t.String(), Rule: rule})
		pinned := netip.AddrPort{}
		if hop == 0 {
			pinned = req.Addr
		}
		resp, ap, err := c.send(ctx, p, pd, tr, t, pinned, method, hdr, nil)
		res.Hops[hop].Addr = ap
		res.URL, res.Rule, res.Addr = t.String(), rule, ap
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
			next, prev = u.String(), t
			continue
		}
		err = readBody(ctx, res, resp, p.MaxBytes())
		res.Duration = time.Since(start)
		return res, err
	}
}

// Post sends req.Body (JSON, at most MaxRequestBytes) to a URL matching a
// webhooks glob, with the same address checks and pinned dialing as
// Fetch. Redirects are not followed: the body goes to the matched URL or
// nowhere; a 3xx is returned as the result.
func (c *Client) Post(ctx context.Context, p *netpolicy.Policy, req PostRequest) (*Result, error) {
	if int64(len(req.Body)) > p.MaxRequestBytes() {
		return nil, denied("body of %d bytes exceeds max_request_bytes %d", len(req.Body), p.MaxRequestBytes())
	}
	if !json.Valid(req.Body) {
		return nil, errors.Join(netpolicy.ErrInvalidRequest, errors.New("body is not JSON"))
	}
	t, rule, err := p.AuthorizeWebhook(req.URL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.Timeout())
	defer cancel()
	start := time.Now()
	pd := newPinnedDialer(c.DialTimeout)
	tr := c.transport(pd)
	defer tr.CloseIdleConnections()
	res := &Result{URL: t.String(), Rule: rule, Hops: []Hop{{URL: t.String(), Rule: rule}}}
	hdr := http.Header{"Content-Type": {"application/json"}}
	resp, ap, err := c.send(ctx, p, pd, tr, t, req.Addr, http.MethodPost, hdr, req.Body)
	res.Addr, res.Hops[0].Addr = ap, ap
	if err != nil {
		res.Duration = time.Since(start)
		return res, err
	}
	res.Hops[0].Status = resp.StatusCode
	err = readBody(ctx, res, resp, p.MaxBytes())
	res.Duration = time.Since(start)
	return res, err
}

// BodyDigest is what the audit records of a post body: "sha256:<hex>" and
// its length, never the body.
func BodyDigest(body []byte) (string, int) {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:]), len(body)
}

// send resolves and pins t (or pins the address the caller resolved and
// decided on, checked again), then performs one request.
func (c *Client) send(ctx context.Context, p *netpolicy.Policy, pd *pinnedDialer, tr *http.Transport, t *netpolicy.Target,
	pinned netip.AddrPort, method string, hdr http.Header, body []byte) (*http.Response, netip.AddrPort, error) {
	ap := pinned
	if ap.IsValid() {
		if _, err := c.CheckAddrs([]netip.Addr{ap.Addr()}, p.InsecureAllowPrivate()); err != nil {
			return nil, netip.AddrPort{}, checkErr(t, err)
		}
		if ap.Port() != t.Port {
			return nil, netip.AddrPort{}, denied("%s: pinned port %d is not the URL's %d", t.Host, ap.Port(), t.Port)
		}
	} else {
		var err error
		if ap, err = c.Resolve(ctx, p, t); err != nil {
			return nil, netip.AddrPort{}, err
		}
	}
	pd.pin(t.HostPort(), ap)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, t.URL.String(), rd)
	if err != nil {
		return nil, ap, denied("request: %v", err)
	}
	hreq.Header = hdr.Clone()
	if hreq.Header.Get("User-Agent") == "" {
		hreq.Header.Set("User-Agent", "sluice-egress")
	}
	resp, err := tr.RoundTrip(hreq)
	if err != nil {
		return nil, ap, classify(ctx, err)
	}
	return resp, ap, nil
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
// connection is dropped.
func readBody(ctx context.Context, res *Result, resp *http.Response, max int64) error {
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
