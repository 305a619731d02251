//go:build linux

package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/daemon/policyfiles"
	"github.com/sluicehq/sluice/egress"
	"github.com/sluicehq/sluice/egress/netpolicy"
	"github.com/sluicehq/sluice/internal/redact"
	"github.com/sluicehq/sluice/internal/secretscan"
)

// The daemon's half of fetch and post (docs/egress.md): authorize the URL
// once into the request to send and look its host up once (the network's
// openat2: the answer is recorded and decided on), then send that request
// to exactly the address the decision checked.

// netClient performs fetch and post: the system resolver, the system's
// roots, proxy variables ignored (egress.Client).
var netClient = &egress.Client{}

// loadNet reads a fetch or post tool's credential values when the
// manifest loads (and on every reload, so a rotated value is picked up
// by the next reload): each value_file as policyfiles.ReadSecret checks
// it (root's, 0600 or 0640, reached through nothing another uid could
// change, beneath no tool's root). The values live in the policy alone,
// never in the manifest, a record or a log line (docs/security.md,
// "Credentials the agent never holds").
func loadNet(p *policy, name string, t *authz.Tool, files *policyfiles.Files) error {
	if len(t.Credentials) == 0 {
		return nil
	}
	values := make(map[string]string, len(t.Credentials))
	for host, c := range t.Credentials {
		key := "tools." + name + ".credentials." + host + ".value_file"
		v, err := files.ReadSecret(key, c.ValueFile)
		if err != nil {
			return fmt.Errorf("manifest: %w", err)
		}
		values[host] = string(v)
	}
	cr, err := egress.NewCredentials(values)
	if err != nil {
		return fmt.Errorf("manifest: tools.%s.credentials.%w", name, err)
	}
	if p.creds == nil {
		p.creds = map[string]*egress.Credentials{}
	}
	p.creds[name] = cr
	return nil
}

// resolveNet resolves a fetch's or post's URL target once: the URL
// authorized by the tool's policy into the request to send (authz.
// NetTarget, pure), then, only when it is allowed, its host looked up
// once — a refused URL costs no lookup, so DNS learns nothing of what an
// agent was refused. Both go into the target's resource, which Decide
// checks (the answer into the decision record too) and the executor
// sends: the URL's held fd.
func (c *call) resolveNet() []authz.Resource {
	nt := c.op.NetTarget(c.tool, c.areq.Args)
	if nt.Refused() {
		return []authz.Resource{{Outcome: authz.OutcomeRefused, Net: nt}} // Decide denies it; not recorded
	}
	t := nt.Request.Target()
	res := authz.Resource{Outcome: authz.OutcomeOK, Path: t.String(), Net: nt}
	ctx, cancel := context.WithTimeout(c.ctx, c.tool.NetPolicy().Timeout())
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

// decidedNet is what the decision checked of the call's URL target: the
// request its URL was authorized into, and the first address of its
// host's one lookup (every one of which was checked); no address when the
// name did not resolve. ok is false when the decision checked no target
// (fail closed).
func (c *call) decidedNet() (r *netpolicy.Request, addr netip.Addr, ok bool) {
	res := c.decidedBy(0)
	if res == nil || res.Net == nil || res.Net.Refused() {
		return nil, netip.Addr{}, false
	}
	if len(res.Addrs) > 0 {
		if a, err := netip.ParseAddr(res.Addrs[0]); err == nil {
			addr = a
		}
	}
	return res.Net.Request, addr, true
}

func execFetch(c *call, _ func(string, []byte)) *outcome {
	r, addr, ok := c.decidedNet()
	if !ok {
		return &outcome{reason: api.ReasonInternalError}
	}
	rec := &audit.Egress{Method: r.Method(), Target: authz.RecordURL(r.Target().String())}
	if !addr.IsValid() {
		return &outcome{reason: api.ReasonUpstreamError, result: &netResult{egress: rec}}
	}
	res, err := netClient.FetchWith(c.ctx, c.tool.NetPolicy(), r, addr, c.p.creds[c.req.Tool])
	return c.netOutcome(res, err, rec)
}

func execPost(c *call, _ func(string, []byte)) *outcome {
	r, addr, ok := c.decidedNet()
	pa, isPost := c.areq.Args.(*authz.PostArgs)
	if !ok || !isPost {
		return &outcome{reason: api.ReasonInternalError}
	}
	digest, n := egress.BodyDigest(pa.Body)
	rec := &audit.Egress{Method: r.Method(), Target: authz.RecordURL(r.Target().String()), BodySHA256: digest, BodyLen: int64(n)}
	if !addr.IsValid() {
		return &outcome{reason: api.ReasonUpstreamError, result: &netResult{egress: rec}}
	}
	res, err := netClient.PostWith(c.ctx, c.tool.NetPolicy(), r, addr, pa.Body, c.p.creds[c.req.Tool])
	return c.netOutcome(res, err, rec)
}

// netResult is a fetch's or post's own result: the response's status
// and content type, and where the request went (the record keeps no
// body).
type netResult struct {
	httpStatus  int
	contentType string
	egress      *audit.Egress
	// url is the last URL requested, after the redirects followed (as
	// asked, query included: the source records it by RecordURL).
	url string
	// echoes counts a credential's value replaced in what the server
	// sent back (egress.CredentialMark), before any redact key ran.
	echoes int
}

// redactedBefore: the credential echoes egress replaced, counted with the
// call's redactions (kind "credential").
func (r *netResult) redactedBefore() secretscan.Counts {
	if r.echoes == 0 {
		return nil
	}
	return secretscan.Counts{"credential": r.echoes}
}

func (r *netResult) wire(res *api.CallResult) {
	res.HTTPStatus, res.ContentType = r.httpStatus, r.contentType
}

func (r *netResult) record(rec *audit.Record) { rec.Egress = r.egress }

func (r *netResult) answered() bool { return r.httpStatus != 0 }

// source: a fetch or post knows where its last request went, the final
// URL after the redirects it followed (a refused redirect's target was
// never asked, so the URL that answered with it stays), recorded as the
// ledger records URLs.
func (r *netResult) source(s *api.Source) {
	if r.url != "" {
		s.URL = authz.RecordURL(r.url)
	}
}

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
		nr.url, nr.echoes = res.URL, res.Redacted
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
