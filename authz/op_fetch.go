package authz

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/egress/netpolicy"
	"github.com/sluicehq/sluice/internal/redact"
)

// FetchArgs are a fetch's args: {"url", "method"?, "headers"?}; Method
// is GET when omitted.
type FetchArgs struct {
	URL *string // nil when absent
	// Method is the effective method, GET or HEAD: decode applies the
	// default, the one place it is applied.
	Method  string
	Headers map[string]string
	// recorded is the URL as the ledger kept it (query values by
	// digest), when the args were read back from a record.
	recorded string
	parsed   parsedURL
}

func (a *FetchArgs) Subject() string {
	if a.recorded != "" {
		return a.recorded
	}
	return derefOr(a.URL)
}

// urlTarget is a fetch's or post's one target: its URL's host, looked up
// once.
func urlTarget[A OpArgs](url func(A) *string) []Target {
	return []Target{{Name: "url", Resolve: ResolveNet, of: func(a OpArgs) *string {
		if v, ok := a.(A); ok {
			return url(v)
		}
		return nil
	}}}
}

// opFetch is a GET or HEAD that sluiced performs itself: args {"url",
// "method"?, "headers"?}. The URL is parsed once (every URL trick
// refused) and authorized once with the method and headers (hosts,
// schemes, ports, allowed_headers) into the request to send; the host is
// looked up once by the daemon and every address of the answer checked
// here, and that request goes to exactly the address that was checked
// (docs/egress.md).
var opFetch = Op{
	Name:     api.OpFetch,
	Hints:    api.ToolHints{ReadOnly: true, Idempotent: true},
	Keys:     []string{"hosts", "schemes", "max_redirects", "allowed_headers", "insecure_allow_private", "timeout_ms", "credentials"},
	Targets:  urlTarget(func(a *FetchArgs) *string { return a.URL }),
	net:      authorizeFetch,
	Effects:  true, // a GET carries what its URL says to a server: durable before it leaves
	validate: []validator{validateCredentials, validateNet},
	decode: func(t *Tool, raw []byte, a *Args) error {
		var fa api.FetchArgs
		if err := strictArgs(raw, &fa); err != nil {
			return err
		}
		f := &FetchArgs{URL: fa.URL, Method: fa.Method, Headers: fa.Headers}
		a.Value = f
		if f.Method == "" {
			f.Method = "GET"
		}
		switch {
		case fa.URL == nil:
			a.Invalid = "args.url: required"
		case f.Method != "GET" && f.Method != "HEAD":
			a.Invalid = "args.method: GET or HEAD"
		}
		rec := map[string]any{"method": f.Method}
		if fa.URL != nil {
			f.parsed = parseURL(*fa.URL)
			recordNetURL(rec, *fa.URL, f.parsed.err, false)
		}
		if len(fa.Headers) > 0 {
			rec["headers"] = recordHeaders(fa.Headers)
		}
		a.Record = RecordArgs(mustJSON(rec))
		return nil
	},
	fromRecord: func(t *Tool, rec []byte, a *Args) bool {
		var fa struct {
			api.FetchArgs
			recordedURL
		}
		if json.Unmarshal(rec, &fa) != nil {
			return false
		}
		a.Value = &FetchArgs{URL: fa.replayURL(fa.URL, nil, false), Method: fa.Method, Headers: fa.Headers,
			recorded: derefOr(fa.URL)}
		return true
	},
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		return decideNet(t, ix, req, authorizeFetch, "hosts", nil)
	},
	// An approver sees the method, the whole URL (its query string is
	// what a fetch carries out) and the headers as the ledger keeps them.
	show: func(t *Tool, a OpArgs, ch *api.ApprovalChange) {
		fa, ok := a.(*FetchArgs)
		if !ok {
			return
		}
		ch.Summary = append(ch.Summary, api.ChangeField{Label: "method", Value: fa.Method})
		if fa.URL != nil {
			ch.URL = *fa.URL
			ch.Summary = append(ch.Summary, api.ChangeField{Label: "url", Value: *fa.URL})
		}
		rec := recordHeaders(fa.Headers)
		for _, k := range slices.Sorted(maps.Keys(rec)) {
			ch.Summary = append(ch.Summary, api.ChangeField{Label: "header", Value: k + ": " + rec[k]})
		}
		showCredential(t, fa.URL, &fa.parsed, ch)
	},
	schema: func(t *Tool) map[string]any {
		return map[string]any{
			"type": "object", "additionalProperties": false, "required": []string{"url"},
			"properties": map[string]any{
				"url":    map[string]any{"type": "string", "description": "An absolute URL on one of: " + strings.Join(t.Hosts, ", ")},
				"method": map[string]any{"type": "string", "enum": []string{"GET", "HEAD"}, "description": "GET (default) or HEAD"},
				"headers": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"},
					"description": "Request headers; only " + strings.Join(allowedHeaders(t), ", ") + credentialNote(t)},
			},
		}
	},
	describe: func(t *Tool) string {
		return fmt.Sprintf("Fetch a URL (GET or HEAD, up to %d bytes) from %s.", t.EffectiveMaxBytes(), strings.Join(t.Hosts, ", "))
	},
}

// authorizeFetch is a fetch's target: its URL as decode parsed it,
// authorized with its method and headers (netpolicy.Policy.AuthorizeFetch).
func authorizeFetch(p *netpolicy.Policy, a OpArgs) (*netpolicy.Request, error) {
	fa, ok := a.(*FetchArgs)
	if !ok {
		if a != nil {
			return nil, errNoNet
		}
		fa = &FetchArgs{}
	}
	t, err := fa.parsed.of(fa.URL)
	if err != nil {
		return nil, err
	}
	return p.AuthorizeFetch(t, fa.Method, fa.Headers)
}

// parsedURL is a fetch's or post's URL as its args' decoder parsed it
// (netpolicy.ParseURL), once: what its target is authorized from.
type parsedURL struct {
	t   *netpolicy.Target
	err error
}

func parseURL(unsafeURL string) parsedURL {
	t, err := netpolicy.ParseURL(unsafeURL)
	return parsedURL{t, err}
}

// of is the URL u parsed: as the decoder kept it, or, for args read back
// from a record or made by hand, parsed now. A nil u is no target (the
// policy refuses it).
func (p *parsedURL) of(u *string) (*netpolicy.Target, error) {
	switch {
	case p.t != nil || p.err != nil:
		return p.t, p.err
	case u == nil:
		return nil, nil
	}
	q := parseURL(*u)
	return q.t, q.err
}

// RecordURL is what the ledger keeps of a fetch's or post's URL, and of
// the resource, target and redirect hops that name one: scheme, authority
// and path as written (cut past MaxURLBytes, which no URL that parses
// reaches), each query parameter's name with a short digest of its value,
// a fragment by digest (redact.URL). API keys travel in query strings;
// the caller, who sent the URL, is answered with the URL itself.
func RecordURL(unsafeURL string) string { return redact.URL(unsafeURL, netpolicy.MaxURLBytes) }

// recordNetURL puts into rec what the ledger keeps of a fetch's or post's
// URL, and what replay needs to decide it again (recordedURL): that it did
// not parse, which every manifest refuses, and, for a post, whose webhooks
// match the query exactly, the sha256 of the whole query.
func recordNetURL(rec map[string]any, unsafeURL string, parseErr error, query bool) {
	rec["url"] = RecordURL(unsafeURL)
	if parseErr != nil {
		rec["url_invalid"] = true
	}
	base, _, _ := strings.Cut(unsafeURL, "#")
	if _, q, _ := strings.Cut(base, "?"); query && q != "" {
		rec["query_sha256"] = redact.Digest(q)
	}
}

// recordedURL is what recordNetURL kept.
type recordedURL struct {
	URLInvalid  bool   `json:"url_invalid"`
	QuerySHA256 string `json:"query_sha256"`
}

// replayURL rebuilds from the recorded args a URL that every manifest
// decides as it would have decided the one sent, though the ledger kept
// no query value:
//   - a URL that did not parse: "", refused by every manifest as it was;
//   - a fetch (hooks nil): the URL before its query and fragment. A
//     fetch's decision is its scheme, host and port once the URL parses;
//   - a post: that, and "?" and the query of the hook in hooks whose
//     sha256 is the recorded query's, since webhooks match the query
//     exactly; "" when no hook's matches (no webhook can match then).
//
// Records written before queries were kept by digest hold the URL as
// sent: one that does not parse is refused, a query is digested here.
func (r *recordedURL) replayURL(recorded *string, hooks []string, post bool) *string {
	if recorded == nil {
		return nil
	}
	refused := ""
	u := *recorded
	if r.URLInvalid {
		return &refused
	}
	if _, err := netpolicy.ParseURL(u); err != nil && len(u) <= netpolicy.MaxURLBytes {
		// Digests make a recorded URL longer, never unparseable: this
		// one was recorded as sent, and refused.
		return &refused
	}
	base, _, _ := strings.Cut(u, "#")
	prefix, query, hasQuery := strings.Cut(base, "?")
	switch {
	case !post || !hasQuery:
		return &prefix
	case query == "":
		s := prefix + "?"
		return &s
	}
	digest := r.QuerySHA256
	if digest == "" {
		digest = redact.Digest(query)
	}
	for _, h := range hooks {
		if _, q, ok := strings.Cut(h, "?"); ok && q != "" && redact.Digest(q) == digest {
			s := prefix + "?" + q
			return &s
		}
	}
	return &refused
}

// validateNet builds a fetch or post tool's network policy: every entry
// checked (netpolicy.NewPolicy), each error naming its key.
func validateNet(key string, t *Tool) error {
	switch {
	case t.Operation == api.OpFetch && len(t.Hosts) == 0:
		return merr(key+".hosts", "missing; list the host names it may fetch from, e.g. [\"api.github.com\"]")
	case t.Operation == api.OpPost && len(t.Webhooks) == 0:
		return merr(key+".webhooks", "missing; list the URLs it may post to, e.g. [\"https://hooks.example.com/notify/*\"]")
	}
	if t.TimeoutMS < 0 || t.TimeoutMS > 3600_000 {
		return merr(key+".timeout_ms", "is %d; use 1 to 3600000 (default 30000)", t.TimeoutMS)
	}
	if t.MaxRequestBytes < 0 || t.MaxRequestBytes > maxMaxBytes {
		return merr(key+".max_request_bytes", "is %d; use 1 to %d (default 65536)", t.MaxRequestBytes, maxMaxBytes)
	}
	c := netpolicy.Config{
		Hosts: t.Hosts, Webhooks: t.Webhooks, Schemes: t.Schemes, InsecureAllowPrivate: t.InsecureAllowPrivate,
		AllowedHeaders: t.AllowedHeaders, MaxBytes: t.EffectiveMaxBytes(), MaxRequestBytes: t.MaxRequestBytes,
		Timeout: netpolicy.TimeoutMS(t.TimeoutMS), Credentials: credentialHeaders(t),
	}
	if t.MaxRedirects != nil {
		if *t.MaxRedirects < 0 || *t.MaxRedirects > 20 {
			return merr(key+".max_redirects", "is %d; use 0 to 20 (default 3)", *t.MaxRedirects)
		}
		c.MaxRedirects = *t.MaxRedirects
		if c.MaxRedirects == 0 {
			c.MaxRedirects = -1 // none followed
		}
	}
	p, err := netpolicy.NewPolicy(c)
	if err != nil {
		return &ManifestError{Key: key, Msg: err.Error()}
	}
	t.net = p
	return nil
}

// NetPolicy is a fetch or post tool's network policy (nil for others).
func (t *Tool) NetPolicy() *netpolicy.Policy { return t.net }

// decideNet decides a fetch or post on its target: the request its URL
// was authorized into (refused: egress_denied, naming the key that
// refused it, urlKey for the URL itself), then the operation's own check
// of its args (a post's body size), then the addresses of the host's one
// lookup (decideAddrs). The target is the one the daemon made when it
// resolved the call (Resource.Net), which the executor sends; a request
// without one (replay, from the recorded URL and addresses) has it made
// here by the same pure function.
func decideNet(t *Tool, ix *toolIndex, req *Request, authorize netAuthorizer, urlKey string, check func() (Decision, bool)) Decision {
	resolved := req.target(0)
	var nt *NetTarget
	if len(resolved) == 1 {
		nt = resolved[0].Net
	}
	switch {
	case nt == nil:
		nt = newNetTarget(authorize, t, req.Args)
	case nt.args != req.Args:
		return deny(api.ReasonInternalError, ix.key) // made for other args: fail closed
	}
	if nt.Refused() {
		var de *netpolicy.DeniedError
		switch {
		case errors.As(nt.err, &de) && de.Key != "":
			return deny(api.ReasonEgressDenied, ix.key+"."+de.Key)
		case errors.As(nt.err, &de):
			return deny(api.ReasonEgressDenied, ix.key+"."+urlKey)
		case errors.Is(nt.err, netpolicy.ErrInvalidRequest):
			return deny(api.ReasonInvalidArgs, ix.key)
		}
		return deny(api.ReasonInternalError, ix.key)
	}
	if check != nil {
		if d, denied := check(); denied {
			return d
		}
	}
	return decideAddrs(t, ix, resolved, ruleKey(ix, nt.Request.Rule()))
}

// decideAddrs checks what the daemon's one lookup of the host returned:
// every address must be one the tool may reach (a public address, unless
// insecure_allow_private), or the call is refused before anything is sent
// (an answer that mixes a public address and 127.0.0.1 is DNS rebinding).
// A name that did not resolve is allowed: the call then ends
// upstream_error without dialing.
func decideAddrs(t *Tool, ix *toolIndex, resolved []Resource, rule string) Decision {
	if len(resolved) != 1 {
		return deny(api.ReasonInternalError, ix.key) // not resolved as it had to be: fail closed
	}
	res := &resolved[0]
	switch res.Outcome {
	case OutcomeOK:
	case OutcomeNotFound:
		d := allow(rule)
		d.Resource = res
		return d
	default:
		d := deny(api.ReasonInternalError, ix.key)
		d.Resource = res
		return d
	}
	addrs := make([]netip.Addr, 0, len(res.Addrs))
	for _, s := range res.Addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return deny(api.ReasonInternalError, ix.key)
		}
		addrs = append(addrs, a)
	}
	if _, err := netpolicy.CheckAddrs(addrs, t.InsecureAllowPrivate); err != nil {
		d := deny(api.ReasonEgressDenied, ix.key+".insecure_allow_private")
		d.Resource = res
		return d
	}
	d := allow(rule)
	d.Resource = res
	return d
}

// ruleKey names the entry that allowed a URL: tools.NAME.hosts[i].
func ruleKey(ix *toolIndex, r netpolicy.Rule) string {
	return ix.key + "." + r.Key + "[" + strconv.Itoa(r.Index) + "]"
}

// allowedHeaders is what a fetch tool lets the agent set.
func allowedHeaders(t *Tool) []string {
	if t.AllowedHeaders == nil {
		return []string{"Accept"}
	}
	return t.AllowedHeaders
}

// recordHeaders is what the ledger keeps of a fetch's headers: Accept as
// given, any other value by digest (an allowed Authorization header is a
// secret).
func recordHeaders(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	}) {
		if strings.EqualFold(k, "Accept") {
			out[k] = h[k]
		} else {
			out[k] = sha256Of([]byte(h[k]))
		}
	}
	return out
}
