package netpolicy

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Defaults for the keys a Config leaves zero.
const (
	DefaultMaxRedirects    = 3
	DefaultMaxBytes        = 65536
	DefaultMaxRequestBytes = 65536
	DefaultTimeout         = 30 * time.Second
)

// Config is a tool's egress configuration as the manifest states it (the
// keys of fetch, post and execute's egress; docs/egress.md). The zero value
// allows nothing: no hosts, no webhooks.
type Config struct {
	// Hosts: "name", "name:port", "*.name" (one or more labels below
	// name, never name itself), or a canonical IP literal ("192.0.2.1",
	// "[2001:db8::1]:8443") — the only way an IP-literal URL is allowed.
	Hosts []string
	// Webhooks: URL globs for post: scheme and host exact, path glob
	// ("*" within a segment, "**" across segments).
	Webhooks []string
	// Schemes allowed: a subset of ["https", "http"]; nil means ["https"].
	Schemes []string
	// InsecureAllowPrivate lets resolved addresses be loopback, private,
	// link-local, ... (tests against local servers only).
	InsecureAllowPrivate bool
	// MaxRedirects: 0 means DefaultMaxRedirects; negative follows none.
	MaxRedirects int
	// AllowedHeaders the agent may set; nil means ["Accept"].
	AllowedHeaders []string
	// MaxBytes caps the response body returned; 0 means DefaultMaxBytes.
	MaxBytes int64
	// MaxRequestBytes caps a post body; 0 means DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// Timeout bounds a whole fetch or post (every hop and the body read);
	// 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxBytesOut caps what one proxied connection may send upstream;
	// 0 means no cap.
	MaxBytesOut int64
	// Credentials of a fetch or post: exact host ("name", "name:port" or
	// an IP literal, as in hosts) -> the header sluiced adds on every
	// request to it (credentials.go). Never a value.
	Credentials map[string]string
}

// Policy is a validated Config, built once when the manifest loads.
type Policy struct {
	hosts           []hostRule
	hooks           []webhookRule
	schemes         map[string]bool
	headers         map[string]bool // canonical header names
	allowPrivate    bool
	maxRedirects    int
	maxBytes        int64
	maxRequestBytes int64
	timeout         time.Duration
	maxBytesOut     int64
	creds           []credRule
}

// Rule names the entry that allowed a request, for the audit record.
type Rule struct {
	Key   string // "hosts" or "webhooks"
	Index int
	Entry string
}

func (r Rule) String() string {
	if r.Key == "" {
		return ""
	}
	return fmt.Sprintf("%s[%d]=%q", r.Key, r.Index, r.Entry)
}

// hopByHop and framing headers the agent may never set, whatever the
// manifest says: they would desynchronize the connection (request
// smuggling) or retarget the request.
var forbiddenHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Keep-Alive": true, "Te": true, "Trailer": true, "Upgrade": true,
	"Proxy-Authorization": true, "Proxy-Connection": true, "Expect": true,
}

// NewPolicy validates c. Errors name the key, the index and the fix.
func NewPolicy(c Config) (*Policy, error) {
	p := &Policy{
		schemes:         map[string]bool{},
		headers:         map[string]bool{},
		allowPrivate:    c.InsecureAllowPrivate,
		maxRedirects:    c.MaxRedirects,
		maxBytes:        c.MaxBytes,
		maxRequestBytes: c.MaxRequestBytes,
		timeout:         c.Timeout,
		maxBytesOut:     c.MaxBytesOut,
	}
	schemes := c.Schemes
	if schemes == nil {
		schemes = []string{"https"}
	}
	for i, s := range schemes {
		if s != "https" && s != "http" {
			return nil, fmt.Errorf("schemes[%d]: %q: only \"https\" and \"http\" are supported", i, s)
		}
		p.schemes[s] = true
	}
	if len(p.schemes) == 0 {
		return nil, fmt.Errorf("schemes: empty: omit the key for [\"https\"]")
	}
	for i, h := range c.Hosts {
		r, err := parseHostRule(h)
		if err != nil {
			return nil, fmt.Errorf("hosts[%d]: %q: %v", i, h, err)
		}
		r.rule = Rule{Key: "hosts", Index: i, Entry: h}
		p.hosts = append(p.hosts, r)
	}
	for i, w := range c.Webhooks {
		r, err := parseWebhook(w)
		if err != nil {
			return nil, fmt.Errorf("webhooks[%d]: %q: %v", i, w, err)
		}
		if !p.schemes[r.scheme] {
			return nil, fmt.Errorf("webhooks[%d]: %q: scheme %s is not in schemes", i, w, r.scheme)
		}
		r.rule = Rule{Key: "webhooks", Index: i, Entry: w}
		p.hooks = append(p.hooks, r)
	}
	headers := c.AllowedHeaders
	if headers == nil {
		headers = []string{"Accept"}
	}
	for i, h := range headers {
		if err := CheckHeader(h, ""); err != nil {
			return nil, fmt.Errorf("allowed_headers[%d]: %q: not a header name", i, h)
		}
		ch := CanonicalHeaderKey(h)
		if forbiddenHeaders[ch] || strings.HasPrefix(ch, "Proxy-") {
			return nil, fmt.Errorf("allowed_headers[%d]: %q: a framing or hop-by-hop header cannot be allowed", i, h)
		}
		p.headers[ch] = true
	}
	if err := p.parseCredentials(c.Credentials); err != nil {
		return nil, err
	}
	switch {
	case p.maxRedirects == 0:
		p.maxRedirects = DefaultMaxRedirects
	case p.maxRedirects < 0:
		p.maxRedirects = 0
	}
	if p.maxBytes == 0 {
		p.maxBytes = DefaultMaxBytes
	}
	if p.maxRequestBytes == 0 {
		p.maxRequestBytes = DefaultMaxRequestBytes
	}
	if p.timeout == 0 {
		p.timeout = DefaultTimeout
	}
	if p.maxBytes < 0 || p.maxRequestBytes < 0 || p.timeout < 0 || p.maxBytesOut < 0 {
		return nil, fmt.Errorf("max_bytes, max_request_bytes, timeout_ms and max_bytes_out must not be negative")
	}
	return p, nil
}

// MaxBytes, MaxRequestBytes, MaxBytesOut, MaxRedirects and Timeout are the
// effective limits (defaults applied).
func (p *Policy) MaxBytes() int64            { return p.maxBytes }
func (p *Policy) MaxRequestBytes() int64     { return p.maxRequestBytes }
func (p *Policy) MaxBytesOut() int64         { return p.maxBytesOut }
func (p *Policy) MaxRedirects() int          { return p.maxRedirects }
func (p *Policy) Timeout() time.Duration     { return p.timeout }
func (p *Policy) InsecureAllowPrivate() bool { return p.allowPrivate }

// hostRule is one parsed hosts entry.
type hostRule struct {
	rule     Rule
	wildcard bool   // "*.base": one or more labels below base
	name     string // base name, or exact name
	ip       netip.Addr
	port     uint16 // 0: the scheme's default port only
}

func parseHostRule(entry string) (hostRule, error) {
	var r hostRule
	s := entry
	if strings.HasPrefix(s, "*.") {
		r.wildcard = true
		s = s[2:]
	}
	if s != strings.ToLower(s) {
		// Entries are compared exactly; say so rather than fold silently.
		return r, fmt.Errorf("write host names in lowercase")
	}
	if strings.ContainsAny(s, "*%@/?#") {
		return r, fmt.Errorf("only a leading \"*.\" wildcard, no path or userinfo")
	}
	if err := checkURLBytes(s); err != nil {
		return r, fmt.Errorf("%v", err)
	}
	t, err := parseAuthority(s, 0)
	if err != nil {
		return r, fmt.Errorf("%v", detailOf(err))
	}
	if t.IP.IsValid() {
		if r.wildcard {
			return r, fmt.Errorf("a wildcard cannot prefix an IP literal")
		}
		if t.IP.Is4() && strings.HasPrefix(s, "[") {
			return r, fmt.Errorf("bracket only IPv6 literals")
		}
		r.ip = t.IP
	} else {
		if r.wildcard && !strings.Contains(t.Host, ".") {
			return r, fmt.Errorf("a wildcard needs at least two labels after \"*.\"")
		}
		r.name = t.Host
	}
	if t.ExplicitPort {
		r.port = t.Port
	}
	return r, nil
}

// portOK: an entry without a port allows only the scheme's default port;
// "name:8443" allows 8443 only. For CONNECT (no scheme) the default ports
// are those of the allowed schemes.
func (p *Policy) portOK(r *hostRule, t *Target) bool {
	if r.port != 0 {
		return t.Port == r.port
	}
	if t.Scheme != "" {
		return t.Port == defaultPort(t.Scheme)
	}
	for s := range p.schemes {
		if t.Port == defaultPort(s) {
			return true
		}
	}
	return false
}

// matchHost reports whether the entry names t's host. Names are compared
// exactly (both are lowercase ASCII). An xn-- (IDNA) label matches only
// when the entry spells it: a wildcard never admits one, so
// "*.example.com" cannot be used to reach "xn--pple-43d.example.com".
func (r *hostRule) matchHost(t *Target) bool {
	if r.ip.IsValid() || t.IP.IsValid() {
		return r.ip.IsValid() && t.IP.IsValid() && r.ip == t.IP
	}
	if !r.wildcard {
		return t.Host == r.name
	}
	prefix, ok := strings.CutSuffix(t.Host, "."+r.name)
	if !ok || prefix == "" {
		return false
	}
	for _, l := range strings.Split(prefix, ".") {
		if strings.HasPrefix(l, "xn--") {
			return false
		}
	}
	return true
}

// Authorize matches a parsed target against the hosts entries and the
// schemes. It returns the matching rule, or an ErrEgressDenied.
func (p *Policy) Authorize(t *Target) (Rule, error) {
	if t.Scheme != "" && !p.schemes[t.Scheme] {
		return Rule{}, denied("scheme %s not allowed", t.Scheme)
	}
	hostSeen := false
	for i := range p.hosts {
		r := &p.hosts[i]
		if !r.matchHost(t) {
			continue
		}
		hostSeen = true
		if p.portOK(r, t) {
			return r.rule, nil
		}
	}
	if hostSeen {
		return Rule{}, denied("port %d not allowed for %s", t.Port, t.Host)
	}
	if t.IP.IsValid() {
		return Rule{}, denied("IP literal %s not listed in hosts", t.Host)
	}
	if hasIDNALabel(t.Host) {
		return Rule{}, denied("IDNA host %s not listed verbatim in hosts", t.Host)
	}
	return Rule{}, denied("host %s not in hosts", t.Host)
}

func hasIDNALabel(host string) bool {
	return strings.HasPrefix(host, "xn--") || strings.Contains(host, ".xn--")
}

// AuthorizeURL parses an untrusted URL and authorizes it against hosts
// and schemes.
func (p *Policy) AuthorizeURL(unsafeURL string) (*Target, Rule, error) {
	t, err := ParseURL(unsafeURL)
	if err != nil {
		return nil, Rule{}, err
	}
	r, err := p.Authorize(t)
	if err != nil {
		return nil, Rule{}, err
	}
	return t, r, nil
}

// AuthorizeConnect parses a CONNECT authority and authorizes it: the port
// must be one an entry allows (an entry without a port: the default ports
// of the allowed schemes).
func (p *Policy) AuthorizeConnect(unsafeAuthority string) (*Target, Rule, error) {
	t, err := ParseAuthority(unsafeAuthority)
	if err != nil {
		return nil, Rule{}, err
	}
	r, err := p.Authorize(t)
	if err != nil {
		return nil, Rule{}, err
	}
	return t, r, nil
}

// webhookRule is one parsed webhooks glob.
type webhookRule struct {
	rule   Rule
	scheme string
	host   *Target // parsed authority: host and port compared exactly
	path   []string
	query  string
	hasQ   bool
}

func parseWebhook(glob string) (webhookRule, error) {
	var r webhookRule
	// The glob's own '*' are not URL syntax; parse a copy with them
	// replaced, then split the path from the raw glob.
	t, err := ParseURL(strings.ReplaceAll(glob, "*", "x"))
	if err != nil {
		return r, fmt.Errorf("%v", detailOf(err))
	}
	r.scheme = t.Scheme
	r.host = t
	rest := glob[len(t.Scheme)+3:]
	i := strings.IndexAny(rest, "/?#")
	if i < 0 {
		rest = "/"
	} else {
		if strings.Contains(rest[:i], "*") {
			return r, fmt.Errorf("the host of a webhook is exact: no wildcard")
		}
		rest = rest[i:]
	}
	if strings.Contains(rest, "#") {
		return r, fmt.Errorf("no fragment in a webhook")
	}
	path := rest
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		path, r.query, r.hasQ = rest[:q], rest[q+1:], true
		if strings.Contains(r.query, "*") {
			return r, fmt.Errorf("a query in a webhook is matched exactly: no wildcard")
		}
	}
	if path == "" {
		path = "/"
	}
	if path[0] != '/' {
		return r, fmt.Errorf("path must start with /")
	}
	if err := checkPath(path); err != nil {
		return r, fmt.Errorf("%v", detailOf(err))
	}
	r.path = strings.Split(path[1:], "/")
	for _, seg := range r.path {
		if strings.Contains(seg, "**") && seg != "**" {
			return r, fmt.Errorf("\"**\" must be a whole path segment")
		}
	}
	return r, nil
}

// AuthorizeWebhook parses an untrusted URL and matches it against the
// webhooks globs: scheme, host and port exact, path by glob, query
// exactly. The glob matches the path as sent, so the path must already be
// in its one canonical form (checkPath), before any lookup: a server that
// decodes or normalizes it would otherwise serve a path the glob never
// matched ("/hooks/x/..%2F..%2Fadmin", and "/hooks/..;/admin", which
// Tomcat and Spring resolve to "/admin"; docs/security.md "The third
// review").
func (p *Policy) AuthorizeWebhook(unsafeURL string) (*Target, Rule, error) {
	t, err := ParseURL(unsafeURL)
	if err != nil {
		return nil, Rule{}, err
	}
	r, err := p.authorizeWebhook(t)
	if err != nil {
		return nil, Rule{}, err
	}
	return t, r, nil
}

// authorizeWebhook matches a target ParseURL made against the webhooks
// globs (AuthorizeWebhook).
func (p *Policy) authorizeWebhook(t *Target) (Rule, error) {
	if t.URL == nil {
		return Rule{}, denied("not a URL")
	}
	if !p.schemes[t.Scheme] {
		return Rule{}, denied("scheme %s not allowed", t.Scheme)
	}
	// The path as the caller wrote it (ParseURL kept it).
	path := t.sentPath
	if err := checkPath(path); err != nil {
		return Rule{}, err
	}
	if path != t.URL.EscapedPath() {
		// What would be sent is not what was checked (cannot happen for a
		// path checkPath accepts; fail closed if it ever does).
		return Rule{}, denied("webhook path is not in canonical form")
	}
	if path == "" {
		path = "/"
	}
	segs := strings.Split(path[1:], "/")
	for i := range p.hooks {
		r := &p.hooks[i]
		if r.scheme != t.Scheme || r.host.Host != t.Host || r.host.IP != t.IP || r.host.Port != t.Port {
			continue
		}
		if r.hasQ != (t.URL.RawQuery != "" || t.URL.ForceQuery) || r.query != t.URL.RawQuery {
			continue
		}
		if matchSegments(r.path, segs) {
			return r.rule, nil
		}
	}
	return Rule{}, denied("url matches no webhook")
}

// matchSegments matches path segments against glob segments: "**" any
// number (zero or more) of segments, otherwise segment-wise globMatch.
func matchSegments(glob, segs []string) bool {
	if len(glob) == 0 {
		return len(segs) == 0
	}
	if glob[0] == "**" {
		for k := 0; k <= len(segs); k++ {
			if matchSegments(glob[1:], segs[k:]) {
				return true
			}
		}
		return false
	}
	if len(segs) == 0 || !globMatch(glob[0], segs[0]) {
		return false
	}
	return matchSegments(glob[1:], segs[1:])
}

// globMatch matches one segment: '*' is any run of bytes (no '/' exists
// within a segment); everything else is literal. Linear two-pointer
// matching, so a hostile path cannot make a many-star glob backtrack
// exponentially.
func globMatch(pat, s string) bool {
	p, i := 0, 0
	starP, starI := -1, 0
	for i < len(s) {
		switch {
		case p < len(pat) && pat[p] == '*':
			starP, starI = p, i
			p++
		case p < len(pat) && pat[p] == s[i]:
			p++
			i++
		case starP >= 0:
			starI++
			p, i = starP+1, starI
		default:
			return false
		}
	}
	for p < len(pat) && pat[p] == '*' {
		p++
	}
	return p == len(pat)
}

// CanonicalHeaderKey is net/http's canonical form of a header name that
// CheckHeader accepted (first letter and each letter after '-' upper
// case, the rest lower case), without importing net/http into this pure
// package.
func CanonicalHeaderKey(name string) string {
	b := []byte(name)
	upper := true
	for i, c := range b {
		switch {
		case upper && c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case !upper && c >= 'A' && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
		upper = c == '-'
	}
	return string(b)
}

// CheckHeaders refuses any header outside allowed_headers and any CR, LF
// or NUL in names or values; it returns the headers under their canonical
// names.
func (p *Policy) CheckHeaders(h map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(h))
	for name, v := range h {
		if err := CheckHeader(name, v); err != nil {
			return nil, err
		}
		cn := CanonicalHeaderKey(name)
		if !p.headers[cn] {
			if len(name) > 64 {
				name = name[:64] + "..."
			}
			return nil, denied("header %s not in allowed_headers", name)
		}
		if _, dup := out[cn]; dup {
			return nil, denied("header %s given twice", cn)
		}
		out[cn] = v
	}
	return out, nil
}

// TimeoutMS is a Timeout of ms milliseconds (0: the default): the
// manifest's timeout_ms, for a caller that reads no clock (authz).
func TimeoutMS(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
