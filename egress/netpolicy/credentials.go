package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// A fetch or post tool's credentials (docs/egress.md, "Credentials"):
// for each exact host (and port) the manifest names, the header sluiced
// adds to every request to it. This half is pure and never holds a value:
// which host gets which header, that the host is one the tool may reach,
// and that an agent-supplied header of the same name for that host is
// refused. The values are read by the daemon and sent by egress.

// credRule is one credentials entry.
type credRule struct {
	key    string // as the manifest wrote it: what the value is found by
	name   string // exact host name, or "" for an IP literal
	ip     netip.Addr
	port   uint16 // 0: the scheme's default port only, as in hosts
	header string // canonical
}

// notCredentialHeaders are headers that cannot carry a credential: the
// framing and hop-by-hop ones an agent may not set either, and those
// sluiced sets itself.
var notCredentialHeaders = map[string]bool{"Content-Type": true, "User-Agent": true}

// parseCredentials validates c (host key -> header name) against p's
// hosts or webhooks and keeps each entry. Keys are sorted so the first
// error is the same on every load.
func (p *Policy) parseCredentials(c map[string]string) error {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		r, err := parseHostRule(k)
		switch {
		case err != nil:
			return fmt.Errorf("credentials.%s: %v", k, err)
		case r.wildcard:
			return fmt.Errorf("credentials.%s: a credential is for one exact host: no wildcard", k)
		}
		h := c[k]
		if err := CheckHeader(h, ""); err != nil {
			return fmt.Errorf("credentials.%s.header: %q is not a header name", k, h)
		}
		ch := CanonicalHeaderKey(h)
		if forbiddenHeaders[ch] || strings.HasPrefix(ch, "Proxy-") || notCredentialHeaders[ch] {
			return fmt.Errorf("credentials.%s.header: %q cannot carry a credential (a framing, hop-by-hop or sluiced-set header)", k, h)
		}
		cr := credRule{key: k, name: r.name, ip: r.ip, port: r.port, header: ch}
		if !p.reaches(&cr) {
			return fmt.Errorf("credentials.%s: not a host this tool may reach; add it to %s, or remove it", k, p.reachKey())
		}
		for _, o := range p.creds {
			if o.overlaps(&cr, p) {
				return fmt.Errorf("credentials.%s: names the same host and port as credentials.%s; keep one", k, o.key)
			}
		}
		p.creds = append(p.creds, cr)
	}
	return nil
}

func (p *Policy) reachKey() string {
	if len(p.hooks) > 0 {
		return "a webhook's host"
	}
	return "hosts"
}

// target is the URL target the rule names under scheme s.
func (r *credRule) target(s string) *Target {
	t := &Target{Scheme: s, Host: r.name, IP: r.ip, Port: r.port}
	if r.ip.IsValid() {
		t.Host = r.ip.String()
	}
	if t.Port == 0 {
		t.Port = defaultPort(s)
	}
	return t
}

// reaches: the rule's host and port, under one of the allowed schemes, is
// one a hosts entry allows (fetch) or a webhook's host and port (post).
func (p *Policy) reaches(r *credRule) bool {
	for s := range p.schemes {
		t := r.target(s)
		if len(p.hooks) == 0 {
			if _, err := p.Authorize(t); err == nil {
				return true
			}
			continue
		}
		for i := range p.hooks {
			w := p.hooks[i].host
			if p.hooks[i].scheme == s && w.Host == t.Host && w.IP == t.IP && w.Port == t.Port {
				return true
			}
		}
	}
	return false
}

// overlaps: both rules match some one URL ("api.example.com" and
// "api.example.com:443" both match https://api.example.com/).
func (r *credRule) overlaps(o *credRule, p *Policy) bool {
	for s := range p.schemes {
		if o.matches(r.target(s)) {
			return true
		}
	}
	return false
}

// matches: t's host is the rule's exactly, and its port the rule's (the
// scheme's default when the rule names none). A CONNECT authority (no
// scheme) never matches: the command proxy adds no credential.
func (r *credRule) matches(t *Target) bool {
	if t == nil || t.Scheme == "" {
		return false
	}
	if r.ip.IsValid() || t.IP.IsValid() {
		if !r.ip.IsValid() || !t.IP.IsValid() || r.ip != t.IP {
			return false
		}
	} else if t.Host != r.name {
		return false
	}
	if r.port != 0 {
		return t.Port == r.port
	}
	return t.Port == defaultPort(t.Scheme)
}

// Credential is the credentials entry for t's host and port: the key the
// manifest wrote (what the daemon found its value by) and the header to
// add. ok is false when the tool names no credential for t, and for a
// plain http target of a tool that may use https: a credential never
// travels in clear text, whether the agent wrote http:// or a redirect
// went down to it, unless the operator allowed http alone.
func (p *Policy) Credential(t *Target) (key, header string, ok bool) {
	if t != nil && t.Scheme == "http" && p.schemes["https"] {
		return "", "", false
	}
	for i := range p.creds {
		if p.creds[i].matches(t) {
			return p.creds[i].key, p.creds[i].header, true
		}
	}
	return "", "", false
}

// HasCredentials reports whether the tool names any credential.
func (p *Policy) HasCredentials() bool { return len(p.creds) > 0 }

// checkCredentialHeader refuses an agent-supplied header that the tool's
// credential for t's host carries: sluiced adds it, and an agent's own
// value would be sent in its place (or, if sluiced's won, the agent could
// not tell which was sent). Refused, not overridden: the agent learns its
// request is not what it wrote.
func (p *Policy) checkCredentialHeader(t *Target, h map[string]string) error {
	if _, name, ok := p.Credential(t); ok {
		if _, set := h[name]; set {
			return invalid("header %s for %s is added by sluiced (credentials); do not set it", name, t.Host)
		}
	}
	return nil
}

// invalid is a malformed request (invalid_args), with its detail.
func invalid(format string, args ...any) error {
	return errors.Join(ErrInvalidRequest, fmt.Errorf(format, args...))
}
