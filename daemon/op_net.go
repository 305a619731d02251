//go:build linux

package daemon

import (
	"context"
	"net/netip"
	"strconv"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/egress"
	"github.com/sluicehq/sluice/internal/redact"
)

// The daemon's half of fetch and post (docs/egress.md): resolve the URL's
// host once (the network's openat2: the answer is recorded and decided on),
// then send the request to exactly the address the decision checked.

// netClient performs fetch and post: the system resolver, the system's
// roots, proxy variables ignored (egress.Client).
var netClient = &egress.Client{}

// resolveNet looks up the host of a fetch's or post's URL once, but only
// when the URL is one the tool allows: a refused URL costs no lookup, so
// DNS learns nothing of what an agent was refused. The answer goes into
// the request (and the decision record) for authz to check.
func (c *call) resolveNet(unsafeURL string) []authz.Resource {
	p := c.tool.NetPolicy()
	t, err := c.op.AuthorizeNet(c.tool, unsafeURL)
	if err != nil {
		return nil // authz denies it (egress_denied) on the same check
	}
	res := authz.Resource{Outcome: authz.OutcomeOK, Path: t.String()}
	ctx, cancel := context.WithTimeout(c.ctx, p.Timeout())
	defer cancel()
	addrs, err := netClient.Lookup(ctx, t)
	switch {
	case err != nil:
		res.Outcome = authz.OutcomeNotFound // allowed; the call ends upstream_error, nothing dialed
	case len(addrs) == 0:
		res.Outcome = authz.OutcomeNotFound
	}
	for _, a := range addrs {
		res.Addrs = append(res.Addrs, a.String())
	}
	return []authz.Resource{res}
}

// pinned is the address the decision checked for t's port: the first of
// the answer (every one of which was checked).
func (c *call) pinned(port uint16) netip.AddrPort {
	r := c.decidedBy(0)
	if r == nil || len(r.Addrs) == 0 {
		return netip.AddrPort{}
	}
	a, err := netip.ParseAddr(r.Addrs[0])
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(a, port)
}

func execFetch(c *call, _ func(string, []byte)) *outcome {
	p := c.tool.NetPolicy()
	fa, ok := c.areq.Args.(*authz.FetchArgs)
	if !ok || fa.URL == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	t, _, err := p.AuthorizeURL(*fa.URL)
	if err != nil {
		return &outcome{reason: api.ReasonEgressDenied}
	}
	addr := c.pinned(t.Port)
	if !addr.IsValid() {
		return &outcome{reason: api.ReasonUpstreamError, result: &netResult{egress: &audit.Egress{Method: fa.Method, Target: authz.RecordURL(t.String())}}}
	}
	res, err := netClient.Fetch(c.ctx, p, egress.FetchRequest{URL: *fa.URL, Method: fa.Method, Headers: fa.Headers, Addr: addr})
	return c.netOutcome(res, err, &audit.Egress{Method: fa.Method, Target: authz.RecordURL(t.String())})
}

func execPost(c *call, _ func(string, []byte)) *outcome {
	p := c.tool.NetPolicy()
	pa, ok := c.areq.Args.(*authz.PostArgs)
	if !ok || pa.URL == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	t, _, err := p.AuthorizeWebhook(*pa.URL)
	if err != nil {
		return &outcome{reason: api.ReasonEgressDenied}
	}
	digest, n := egress.BodyDigest(pa.Body)
	rec := &audit.Egress{Method: "POST", Target: authz.RecordURL(t.String()), BodySHA256: digest, BodyLen: int64(n)}
	addr := c.pinned(t.Port)
	if !addr.IsValid() {
		return &outcome{reason: api.ReasonUpstreamError, result: &netResult{egress: rec}}
	}
	res, err := netClient.Post(c.ctx, p, egress.PostRequest{URL: *pa.URL, Body: pa.Body, Addr: addr})
	return c.netOutcome(res, err, rec)
}

// netResult is a fetch's or post's own result: the response's status
// and content type, and where the request went (the record keeps no
// body).
type netResult struct {
	httpStatus  int
	contentType string
	egress      *audit.Egress
}

func (r *netResult) wire(res *api.CallResult) {
	res.HTTPStatus, res.ContentType = r.httpStatus, r.contentType
}

func (r *netResult) record(rec *audit.Record) { rec.Egress = r.egress }

func (r *netResult) answered() bool { return r.httpStatus != 0 }

// maxHopURL bounds the scheme, authority and path a redirect hop's record
// keeps: up to max_redirects (20) hops are recorded per call.
const maxHopURL = 1024

// netOutcome turns what egress returned into the call's outcome and its
// record: where the request went (each hop), the address dialed, status
// and byte counts; the body goes to the caller only, never to the ledger.
// ok is a response below 400.
func (c *call) netOutcome(res *egress.Result, err error, rec *audit.Egress) *outcome {
	nr := &netResult{egress: rec}
	o := &outcome{result: nr}
	if res != nil {
		if res.Addr.IsValid() {
			rec.Addr = res.Addr.String()
		}
		rec.Status, rec.ContentType, rec.BytesIn = res.Status, res.ContentType, res.Bytes
		rec.BytesOut = rec.BodyLen
		for _, h := range res.Hops {
			// A refused redirect's URL is whatever the server's Location
			// said: bounded, and its query kept by digest, like the rest.
			hop := audit.EgressHop{URL: redact.URL(h.URL, maxHopURL), Status: h.Status}
			if h.Addr.IsValid() {
				hop.Addr = h.Addr.String()
			}
			if h.Rule.Key != "" {
				// The entry's key, as the decision names it, not its text:
				// a webhook's query in the manifest may hold a token.
				hop.Rule = "tools." + c.req.Tool + "." + h.Rule.Key + "[" + strconv.Itoa(h.Rule.Index) + "]"
			}
			rec.Hops = append(rec.Hops, hop)
		}
	}
	if err != nil {
		// egress_denied, invalid_args, upstream_error (a timeout too), or
		// why the call was cancelled.
		o.reason = c.reasonOf(err, "egress request")
		return o
	}
	o.ok = res.Status < 400
	o.reason = api.ReasonAllowed
	o.output, o.truncated = res.Body, res.Truncated
	nr.httpStatus, nr.contentType = res.Status, res.ContentType
	return o
}

// showBodyNow adds a parked post's body, read back from the spill and
// checked against the digest the approval binds.
func showBodyNow(_ context.Context, d *Daemon, _ *policy, pk *parked, ch *api.ApprovalChange) {
	if body, ok := d.parkedContent(pk); ok {
		ch.Body = body
	}
}
