package netpolicy

import (
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// MaxURLBytes bounds an untrusted URL before it is parsed.
const MaxURLBytes = 8192

// Target is an untrusted URL (or CONNECT authority) that survived parsing:
// what is later authorized, resolved and dialed is this value, never the
// string again.
type Target struct {
	// Scheme is "https" or "http"; "" for a CONNECT authority.
	Scheme string
	// Host is a lowercase ASCII DNS name without a trailing dot, or, when
	// IP is valid, the canonical text of an IP literal (no brackets).
	Host string
	// Port is the explicit port, or the scheme's default.
	Port uint16
	// ExplicitPort says the URL named its port.
	ExplicitPort bool
	// IP is the literal address when the URL's host was an IP literal.
	IP netip.Addr
	// URL is the parsed URL (nil for a CONNECT authority); its Host is
	// rewritten to the normalized form.
	URL *url.URL
	// sentPath is the path as the caller wrote it (after the authority,
	// up to the query or fragment): what a webhooks glob is matched
	// against.
	sentPath string
}

// HostPort is "host:port" ("[v6]:port" for an IPv6 literal): the address
// the transport asks the pinned dialer for.
func (t *Target) HostPort() string {
	h := t.Host
	if t.IP.Is6() {
		h = "[" + h + "]"
	}
	return h + ":" + strconv.Itoa(int(t.Port))
}

// String is the URL, or the authority for CONNECT.
func (t *Target) String() string {
	if t.URL != nil {
		return t.URL.String()
	}
	return t.HostPort()
}

func defaultPort(scheme string) uint16 {
	switch scheme {
	case "https":
		return 443
	case "http":
		return 80
	}
	return 0
}

// ParseURL parses an untrusted absolute http(s) URL, refusing every
// form whose meaning depends on which parser reads it. It checks syntax
// only; Policy.AuthorizeURL adds the scheme, host and port allowlist.
//
// Refused (each an ErrEgressDenied):
//   - control characters, spaces, backslashes or non-ASCII anywhere: CR/LF
//     smuggle headers into the request line, NUL truncates in C resolvers,
//     and "\" is a path separator to WHATWG parsers but not to Go's, so
//     "https://evil\@api.github.com" names different hosts to each;
//     non-ASCII also covers IDNA look-alikes ("аpi.github.com" with a
//     Cyrillic а) and full-width dots;
//   - userinfo ("https://api.github.com@evil.example/"): the host is evil;
//   - percent-encoding in the authority ("https://%61pi.github.com"): Go
//     decodes it, a proxy or resolver may not;
//   - an authority Go's parser reads differently from the raw text;
//   - IP literals in any encoding but the canonical one (2130706433,
//     0x7f.1, 017700000001, 127.1): inet_aton reads them as 127.0.0.1;
//   - a trailing dot ("api.github.com."): a different name to TLS, cookies
//     and virtual hosting, the same to DNS;
//   - ports with leading zeros, out of range, or an empty ":".
func ParseURL(unsafeURL string) (*Target, error) {
	if len(unsafeURL) > MaxURLBytes {
		return nil, denied("url longer than %d bytes", MaxURLBytes)
	}
	if err := checkURLBytes(unsafeURL); err != nil {
		return nil, err
	}
	u, err := url.Parse(unsafeURL)
	if err != nil {
		return nil, denied("url does not parse")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, denied("scheme %q is not http or https", u.Scheme)
	}
	if u.Opaque != "" || !strings.HasPrefix(unsafeURL[len(u.Scheme)+1:], "//") {
		return nil, denied("url has no authority")
	}
	if u.User != nil {
		return nil, denied("url has userinfo")
	}
	rest := unsafeURL[len(u.Scheme)+3:]
	authority, sentPath := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, sentPath = rest[:i], rest[i:]
		if j := strings.IndexAny(sentPath, "?#"); j >= 0 {
			sentPath = sentPath[:j]
		}
	}
	if strings.ContainsAny(authority, "%@") {
		return nil, denied("percent-encoding or @ in the authority")
	}
	if authority != u.Host {
		return nil, denied("ambiguous authority")
	}
	t, err := parseAuthority(authority, defaultPort(u.Scheme))
	if err != nil {
		return nil, err
	}
	t.Scheme, t.sentPath = u.Scheme, sentPath
	u.Host = t.hostForURL()
	u.Fragment, u.RawFragment = "", ""
	t.URL = u
	return t, nil
}

// ParseAuthority parses the "host:port" of an HTTP CONNECT request with
// the same host rules as ParseURL. The port is required.
func ParseAuthority(unsafeAuthority string) (*Target, error) {
	if len(unsafeAuthority) > 512 {
		return nil, denied("authority too long")
	}
	if err := checkURLBytes(unsafeAuthority); err != nil {
		return nil, err
	}
	if strings.ContainsAny(unsafeAuthority, "%@/?#") {
		return nil, denied("authority has forbidden characters")
	}
	t, err := parseAuthority(unsafeAuthority, 0)
	if err != nil {
		return nil, err
	}
	if !t.ExplicitPort {
		return nil, denied("authority has no port")
	}
	return t, nil
}

// hostForURL is the Host of the normalized URL: lowercase, and the port
// only when the original URL named it.
func (t *Target) hostForURL() string {
	h := t.Host
	if t.IP.Is6() {
		h = "[" + h + "]"
	}
	if t.ExplicitPort {
		h += ":" + strconv.Itoa(int(t.Port))
	}
	return h
}

func checkURLBytes(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\r' || c == '\n':
			return denied("CR or LF in url")
		case c == 0:
			return denied("NUL in url")
		case c <= ' ' || c == 0x7f:
			return denied("control character or space in url")
		case c == '\\':
			return denied("backslash in url")
		case c >= 0x80:
			return denied("non-ASCII byte in url (percent-encode paths; IDNA hosts must be listed in their xn-- form)")
		}
	}
	return nil
}

// parseAuthority splits and checks host[:port]. def is the default port
// (0: none).
func parseAuthority(authority string, def uint16) (*Target, error) {
	t := &Target{Port: def}
	host := authority
	portStr := ""
	hasPort := false
	if strings.HasPrefix(authority, "[") {
		end := strings.IndexByte(authority, ']')
		if end < 0 {
			return nil, denied("unterminated IPv6 literal")
		}
		host = authority[1:end]
		after := authority[end+1:]
		if after != "" {
			if after[0] != ':' {
				return nil, denied("garbage after IPv6 literal")
			}
			portStr, hasPort = after[1:], true
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return nil, denied("invalid IPv6 literal")
		}
		t.IP = a
		t.Host = a.String()
	} else {
		if i := strings.LastIndexByte(authority, ':'); i >= 0 {
			host, portStr, hasPort = authority[:i], authority[i+1:], true
		}
		if strings.Contains(host, ":") {
			return nil, denied("colon in host")
		}
		host = strings.ToLower(host)
		if host == "" {
			return nil, denied("empty host")
		}
		if strings.HasSuffix(host, ".") {
			return nil, denied("trailing dot in host")
		}
		if looksNumeric(host) {
			a, err := netip.ParseAddr(host)
			if err != nil || !a.Is4() {
				return nil, denied("IP literal in a non-canonical encoding")
			}
			t.IP = a
			t.Host = a.String()
		} else {
			if err := checkDNSName(host); err != nil {
				return nil, err
			}
			t.Host = host
		}
	}
	if hasPort {
		p, err := parsePort(portStr)
		if err != nil {
			return nil, err
		}
		t.Port, t.ExplicitPort = p, true
	}
	return t, nil
}

// looksNumeric applies the WHATWG "ends in a number" rule: a host whose
// last label is decimal digits or 0x-hex is an IPv4 address to browsers
// and to inet_aton, whatever else it looks like (0x7f.1, 127.1,
// 2130706433). No real TLD is numeric, so such a host is never a name.
func looksNumeric(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if strings.HasPrefix(last, "0x") {
		for _, c := range last[2:] {
			if !isHex(byte(c)) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// checkDNSName accepts LDH names: labels of 1-63 [a-z0-9-] not starting or
// ending with '-', 253 bytes at most. Underscores and every other byte are
// refused, so a host has one spelling.
func checkDNSName(host string) error {
	if len(host) > 253 {
		return denied("host name too long")
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 {
			return denied("empty or over-long label in host")
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return denied("label starts or ends with '-'")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return denied("invalid character %q in host", c)
			}
		}
	}
	return nil
}

func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 || (len(s) > 1 && s[0] == '0') {
		return 0, denied("invalid port %q", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, denied("invalid port %q", s)
	}
	return uint16(n), nil
}

// checkPath refuses a URL path that is not already in its one canonical
// form, so that a glob matched against it is matched against what every
// server will route. Servers differ on what they decode and normalize
// away; whatever any of them changes is refused:
//   - ';' anywhere: a path parameter to Tomcat, Jetty and Spring, which
//     drop it before routing, so "/hooks/..;/admin" is "/admin" there
//     while the glob "/hooks/**" sees a segment "..;" (and ".;" is ".");
//   - "." and ".." segments, and any segment of dots only ("..." is ".."
//     to a server that strips trailing dots);
//   - empty segments ("//") but a trailing one ("/hooks/x/"): servers
//     that merge slashes route "/hooks//x" as "/hooks/x";
//   - percent-encoded '/', '\', '.', ';' or '%' (%2F, %5C, %2E, %3B, %25
//     and so double encodings such as %252e): decoded, they are
//     separators, dot segments or parameters;
//   - percent-encoded control bytes and bytes >= 0x80: NUL truncates in C
//     servers, overlong UTF-8 (%C0%AE) is '.' to some decoders, and
//     Unicode normalization makes full-width '．' and '／' into '.' and
//     '/'; a webhook path is ASCII;
//   - any other escape of a byte that needs none (%61 for 'a'), lowercase
//     hex (%2f), a malformed escape, and raw bytes outside RFC 3986's
//     pchar ('"', '<', '>', '[', ']', '^', '`', '{', '|', '}'), so the
//     path has one spelling.
//
// A webhooks glob's path is held to the same form ('*' is a pchar).
func checkPath(path string) error {
	if path == "" {
		return nil // "/"
	}
	if path[0] != '/' {
		return denied("path does not start with /")
	}
	segs := strings.Split(path[1:], "/")
	for i, seg := range segs {
		if seg == "" && i != len(segs)-1 {
			return denied("empty path segment (//)")
		}
		if seg != "" && strings.Trim(seg, ".") == "" {
			return denied("dot segment %q in path", seg)
		}
		for j := 0; j < len(seg); j++ {
			c := seg[j]
			switch {
			case c == ';':
				return denied("';' in path (a path parameter: /x/..;/y is /y to Tomcat and Spring)")
			case c == '%':
				if j+2 >= len(seg) || !isUpperHex(seg[j+1]) || !isUpperHex(seg[j+2]) {
					return denied("malformed or lowercase percent-escape in path")
				}
				b := unhex(seg[j+1])<<4 | unhex(seg[j+2])
				switch {
				case b == '/' || b == '\\' || b == '.' || b == ';' || b == '%':
					return denied("percent-encoded %q in path", b)
				case b < 0x20 || b >= 0x7f:
					return denied("percent-encoded control or non-ASCII byte in path")
				case isPchar(b):
					return denied("percent-escape of %q, which needs none", b)
				}
				j += 2
			case !isPchar(c):
				return denied("byte %q in path must be percent-encoded", c)
			}
		}
	}
	return nil
}

// isPchar: RFC 3986's pchar less '%' — unreserved, sub-delims, ':' and
// '@' — the bytes a path segment holds unescaped.
func isPchar(c byte) bool {
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@", c) >= 0
}

func isUpperHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}

// CheckHeader refuses a request header that is not an RFC 9110 token name
// with a value free of CR, LF, NUL and other control bytes (HTAB allowed):
// CR/LF in either splits one header into two, or ends the header block.
func CheckHeader(name, value string) error {
	if name == "" || len(name) > 256 {
		return denied("empty or over-long header name")
	}
	for i := 0; i < len(name); i++ {
		if !isTchar(name[i]) {
			return denied("invalid byte in header name %q", name)
		}
	}
	if len(value) > 8192 {
		return denied("header %s: value too long", name)
	}
	for i := 0; i < len(value); i++ {
		c := value[i]
		if c == '\r' || c == '\n' || c == 0 {
			return denied("header %s: CR, LF or NUL in value", name)
		}
		if (c < ' ' && c != '\t') || c == 0x7f {
			return denied("header %s: control byte in value", name)
		}
	}
	return nil
}

func isTchar(c byte) bool {
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
