package netpolicy

import (
	"errors"
	"maps"
)

// Request is a fetch's or post's first request as its tool's policy
// authorized it, once: the URL parsed (Target: scheme, host, port, the URL
// normalized with its path and query as sent), the entry that allowed it,
// the method, and the headers under their canonical names, each checked
// against allowed_headers. It is the URL's equivalent of a held fd: only
// AuthorizeFetch and AuthorizePost make one, the decision checks it with
// the addresses its host's one lookup returned, and the executor (egress)
// sends exactly it to the address the decision checked, never parsing or
// authorizing the URL string again. A redirect hop is a new URL,
// authorized on its own (AuthorizeURL).
type Request struct {
	target  *Target
	rule    Rule
	method  string
	headers map[string]string
}

// Target is the request's URL, parsed and authorized.
func (r *Request) Target() *Target { return r.target }

// Rule is the entry that allowed the URL.
func (r *Request) Rule() Rule { return r.rule }

// Method is GET or HEAD for a fetch, POST for a post.
func (r *Request) Method() string { return r.method }

// Headers are the request's headers under their canonical names (a copy):
// only allowed_headers, none with CR, LF or NUL. A post has none.
func (r *Request) Headers() map[string]string { return maps.Clone(r.headers) }

// AuthorizeFetch authorizes a fetch: t, a URL ParseURL made, against
// hosts and schemes (Authorize), then its headers (CheckHeaders). method
// is the effective one, GET or HEAD, as the fetch's args decoded it (the
// one place its default is applied); any other is ErrInvalidRequest, and
// so is a header the tool's credential for t's host carries (sluiced adds
// it; credentials.go). A refusal names the key that refused it
// (DeniedError.Key).
func (p *Policy) AuthorizeFetch(t *Target, method string, headers map[string]string) (*Request, error) {
	if t == nil || t.URL == nil {
		return nil, &DeniedError{Detail: "not a URL", Key: "hosts"}
	}
	rule, err := p.Authorize(t)
	if err != nil {
		return nil, keyed(err, "hosts")
	}
	if method != "GET" && method != "HEAD" {
		return nil, errors.Join(ErrInvalidRequest, errors.New("method must be GET or HEAD"))
	}
	h, err := p.CheckHeaders(headers)
	if err != nil {
		return nil, keyed(err, "allowed_headers")
	}
	if err := p.checkCredentialHeader(t, h); err != nil {
		return nil, err
	}
	return &Request{target: t, rule: rule, method: method, headers: h}, nil
}

// AuthorizePost authorizes a post: t, a URL ParseURL made, against the
// webhooks globs (AuthorizeWebhook). A post sends no agent headers. The
// body's size is the decision's to check (max_request_bytes); its being
// JSON, the args decoder's.
func (p *Policy) AuthorizePost(t *Target) (*Request, error) {
	if t == nil || t.URL == nil {
		return nil, &DeniedError{Detail: "not a URL", Key: "webhooks"}
	}
	rule, err := p.authorizeWebhook(t)
	if err != nil {
		return nil, keyed(err, "webhooks")
	}
	return &Request{target: t, rule: rule, method: "POST"}, nil
}
