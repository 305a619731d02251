package netpolicy

import (
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// tableConfig is the policy every URL case is judged by.
var tableConfig = Config{
	Hosts: []string{
		"api.github.com",
		"*.example.com",
		"alt.example.org:8443",
		"xn--bcher-kva.example",
		"192.0.2.10",
		"[2001:db8::10]:8443",
	},
}

// urlCases is the one table of URL tricks: each row is an untrusted URL
// and what Policy.AuthorizeURL must make of it. host/port are checked for
// the allowed rows.
var urlCases = []struct {
	name string
	url  string
	host string // "" = must be refused
	port uint16
}{
	{"plain", "https://api.github.com/repos/x?q=1", "api.github.com", 443},
	{"uppercase host is folded", "https://API.GitHub.COM/x", "api.github.com", 443},
	{"uppercase scheme", "HTTPS://api.github.com/", "api.github.com", 443},
	{"explicit default port", "https://api.github.com:443/", "api.github.com", 443},
	{"fragment dropped", "https://api.github.com/#frag", "api.github.com", 443},
	{"wildcard one label", "https://a.example.com/", "a.example.com", 443},
	{"wildcard two labels", "https://a.b.example.com/", "a.b.example.com", 443},
	{"entry port", "https://alt.example.org:8443/", "alt.example.org", 8443},
	{"idna listed verbatim", "https://xn--bcher-kva.example/", "xn--bcher-kva.example", 443},
	{"listed IPv4 literal", "https://192.0.2.10/", "192.0.2.10", 443},
	{"listed IPv6 literal", "https://[2001:db8::10]:8443/", "2001:db8::10", 8443},
	{"percent-encoded CRLF in path stays encoded", "https://api.github.com/a%0d%0ab", "api.github.com", 443},

	{"other port", "https://api.github.com:8443/", "", 0},
	{"port out of range", "https://api.github.com:99999/", "", 0},
	{"port with leading zero", "https://api.github.com:0443/", "", 0},
	{"empty port", "https://api.github.com:/", "", 0},
	{"two ports", "https://api.github.com:443:443/", "", 0},
	{"entry port but default", "https://alt.example.org/", "", 0},
	{"scheme http not allowed", "http://api.github.com/", "", 0},
	{"scheme ftp", "ftp://api.github.com/", "", 0},
	{"scheme file", "file:///etc/passwd", "", 0},
	{"scheme javascript", "javascript:alert(1)", "", 0},
	{"no scheme", "//api.github.com/", "", 0},
	{"relative", "/etc/passwd", "", 0},
	{"opaque", "https:api.github.com", "", 0},
	{"empty host", "https:///api.github.com", "", 0},
	{"userinfo names the host", "https://api.github.com@evil.test/", "", 0},
	{"userinfo with password", "https://user:pw@api.github.com/", "", 0},
	{"empty userinfo", "https://@api.github.com/", "", 0},
	{"fragment before @", "https://evil.test#@api.github.com/", "", 0},
	{"query before @", "https://evil.test?@api.github.com/", "", 0},
	{"backslash before @", "https://evil.test\\@api.github.com/", "", 0},
	{"backslash as slash", "https://api.github.com\\evil.test/", "", 0},
	{"loopback IPv4", "https://127.0.0.1/", "", 0},
	{"decimal IPv4", "https://2130706433/", "", 0},
	{"hex IPv4", "https://0x7f.1/", "", 0},
	{"hex IPv4 full", "https://0x7f000001/", "", 0},
	{"octal IPv4", "https://017700000001/", "", 0},
	{"octal dotted", "https://0177.0.0.1/", "", 0},
	{"short IPv4", "https://127.1/", "", 0},
	{"numeric last label", "https://api.github.123/", "", 0},
	{"mapped IPv6", "https://[::ffff:127.0.0.1]/", "", 0},
	{"loopback IPv6", "https://[::1]/", "", 0},
	{"zoned IPv6", "https://[fe80::1%25eth0]/", "", 0},
	{"unlisted IPv4 in listed-IP encoding", "https://192.0.2.11/", "", 0},
	{"listed IP via mapped form", "https://[::ffff:192.0.2.10]/", "", 0},
	{"trailing dot", "https://api.github.com./", "", 0},
	{"two trailing dots", "https://api.github.com../", "", 0},
	{"percent-encoded host", "https://%61pi.github.com/", "", 0},
	{"percent-encoded dot", "https://api%2egithub.com/", "", 0},
	{"cyrillic a", "https://\u0430pi.github.com/", "", 0},
	{"ideographic full stop", "https://api.github\u3002com/", "", 0},
	{"fullwidth host", "https://\uff41pi.github.com/", "", 0},
	{"non-ASCII in path", "https://api.github.com/\u00e9", "", 0},
	{"punycode not listed", "https://xn--pi-7ld.github.com/", "", 0},
	{"punycode under wildcard", "https://xn--80ak6aa92e.example.com/", "", 0},
	{"apex under wildcard", "https://example.com/", "", 0},
	{"suffix without dot", "https://evilexample.com/", "", 0},
	{"suffix of listed", "https://api.github.com.evil.test/", "", 0},
	{"prefix of listed", "https://x.api.github.com/", "", 0},
	{"underscore", "https://api_github.com/", "", 0},
	{"label with leading dash", "https://-api.github.com/", "", 0},
	{"empty label", "https://api..github.com/", "", 0},
	{"CR LF in path", "https://api.github.com/\r\nHost: evil.test", "", 0},
	{"LF in host", "https://api.github.com\n.evil.test/", "", 0},
	{"NUL in host", "https://api.github.com\x00.evil.test/", "", 0},
	{"NUL in path", "https://api.github.com/\x00", "", 0},
	{"tab", "https://api.github.com/\t", "", 0},
	{"space", "https://api.github.com /", "", 0},
	{"unterminated IPv6", "https://[::1/", "", 0},
	{"too long", "https://api.github.com/" + strings.Repeat("a", MaxURLBytes), "", 0},
}

func TestAuthorizeURLTable(t *testing.T) {
	p := mustPolicy(t, tableConfig)
	for _, c := range urlCases {
		t.Run(c.name, func(t *testing.T) {
			tg, rule, err := p.AuthorizeURL(c.url)
			if c.host == "" {
				if err == nil {
					t.Fatalf("%q: allowed as %s (rule %s), want refused", c.url, tg, rule)
				}
				if !errors.Is(err, ErrEgressDenied) {
					t.Fatalf("%q: error %v is not ErrEgressDenied", c.url, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%q: %v", c.url, err)
			}
			if tg.Host != c.host || tg.Port != c.port || rule.Key != "hosts" {
				t.Fatalf("%q: got host %q port %d rule %v, want %q %d", c.url, tg.Host, tg.Port, rule, c.host, c.port)
			}
			if tg.URL.User != nil || tg.URL.Fragment != "" {
				t.Fatalf("%q: normalized URL %s keeps userinfo or fragment", c.url, tg.URL)
			}
			// The normalized URL is a fixed point.
			again, _, err := p.AuthorizeURL(tg.String())
			if err != nil || again.Host != tg.Host || again.Port != tg.Port {
				t.Fatalf("%q: normalized %s does not re-authorize the same: %v", c.url, tg, err)
			}
		})
	}
}

func TestAuthorizeConnect(t *testing.T) {
	p := mustPolicy(t, Config{Hosts: []string{"api.test", "alt.test:8443"}, Schemes: []string{"https", "http"}})
	for _, c := range []struct {
		auth string
		ok   bool
	}{
		{"api.test:443", true},
		{"api.test:80", true}, // http is allowed: its default port too
		{"API.test:443", true},
		{"api.test:22", false},
		{"api.test", false},
		{"alt.test:8443", true},
		{"alt.test:443", false},
		{"evil.test:443", false},
		{"127.0.0.1:443", false},
		{"[::1]:443", false},
		{"api.test.:443", false},
		{"user@api.test:443", false},
		{"api.test:443/x", false},
		{"api.test:443\r\n", false},
	} {
		_, _, err := p.AuthorizeConnect(c.auth)
		if (err == nil) != c.ok {
			t.Errorf("CONNECT %q: err %v, want ok=%v", c.auth, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrEgressDenied) {
			t.Errorf("CONNECT %q: %v is not ErrEgressDenied", c.auth, err)
		}
	}
}

func TestNewPolicyErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Hosts: []string{"API.test"}}, "hosts[0]"},
		{Config{Hosts: []string{"ok.test", "*"}}, "hosts[1]"},
		{Config{Hosts: []string{"*.com"}}, "two labels"},
		{Config{Hosts: []string{"a.*.test"}}, "wildcard"},
		{Config{Hosts: []string{"*.127.0.0.1"}}, "hosts[0]"},
		{Config{Hosts: []string{"api.test."}}, "trailing dot"},
		{Config{Hosts: []string{"0x7f.1"}}, "non-canonical"},
		{Config{Hosts: []string{"https://api.test"}}, "hosts[0]"},
		{Config{Hosts: []string{"b\u00fccher.test"}}, "non-ASCII"},
		{Config{Schemes: []string{"ftp"}}, "schemes[0]"},
		{Config{Schemes: []string{}}, "schemes"},
		{Config{AllowedHeaders: []string{"Host"}}, "allowed_headers[0]"},
		{Config{AllowedHeaders: []string{"Accept", "Transfer-Encoding"}}, "allowed_headers[1]"},
		{Config{AllowedHeaders: []string{"Bad Header"}}, "allowed_headers[0]"},
		{Config{Webhooks: []string{"https://*.hooks.test/x"}}, "webhooks[0]"},
		{Config{Webhooks: []string{"http://hooks.test/x"}}, "not in schemes"},
		{Config{Webhooks: []string{"https://hooks.test/a**"}}, "whole path segment"},
		{Config{Webhooks: []string{"https://hooks.test/hooks/..;/x/*"}}, "';' in path"},
		{Config{Webhooks: []string{"https://hooks.test/hooks/../x/*"}}, "dot segment"},
		{Config{Webhooks: []string{"https://hooks.test/hooks//x"}}, "empty path segment"},
		{Config{Webhooks: []string{"https://hooks.test/hooks/%2e/x"}}, "lowercase"},
		{Config{MaxBytes: -1}, "negative"},
	} {
		_, err := NewPolicy(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewPolicy(%+v) = %v, want an error containing %q", c.cfg, err, c.want)
		}
	}
}

func TestWebhookGlobs(t *testing.T) {
	p := mustPolicy(t, Config{Webhooks: []string{
		"https://hooks.test/*",
		"https://hooks.test:8443/services/**/notify",
		"https://chat.test/api/v1/rooms/*-alerts?token=abc",
		"https://hooks.test:9443/hooks/**",
	}})
	for _, c := range []struct {
		url  string
		rule int // -1 = refused
	}{
		{"https://hooks.test/abc", 0},
		{"https://HOOKS.test/abc", 0},
		{"https://hooks.test/", 0},
		{"https://hooks.test/a/b", -1},
		{"https://hooks.test", 0}, // an empty path is "/"
		{"https://hooks.test/abc?x=1", -1},
		{"http://hooks.test/abc", -1},
		{"https://hooks.test:443/abc", 0},
		{"https://hooks.test:8443/abc", -1},
		{"https://sub.hooks.test/abc", -1},
		{"https://hooks.test/a%2Fb", -1},
		{"https://hooks.test/..", -1},
		{"https://hooks.test/%2e%2e", -1},
		{"https://hooks.test:8443/services/notify", 1},
		{"https://hooks.test:8443/services/a/b/c/notify", 1},
		{"https://hooks.test:8443/services/a/../notify", -1},
		{"https://hooks.test:8443/services/a/notify/x", -1},
		{"https://chat.test/api/v1/rooms/ops-alerts?token=abc", 2},
		{"https://chat.test/api/v1/rooms/ops-alerts?token=abd", -1},
		{"https://chat.test/api/v1/rooms/ops-alerts", -1},
		{"https://chat.test/api/v1/rooms/ops/x-alerts?token=abc", -1},
		{"https://hooks.test@evil.test/abc", -1},
		// A path not in its one canonical form, which some server
		// normalizes into one the glob never matched (docs/security.md
		// "The third review": Tomcat and Spring route /hooks/..;/admin
		// as /admin).
		{"https://hooks.test:9443/hooks/a/b", 3},
		{"https://hooks.test:9443/hooks/", 3},
		{"https://hooks.test:9443/hooks/a%20b/c", 3},
		{"https://hooks.test:9443/hooks/a-b_c~d.json", 3},
		{"https://hooks.test:9443/hooks/a:b@c!$&'()*+,=", 3},
		{"https://hooks.test:9443/hooks/..;/admin", -1},
		{"https://hooks.test:9443/hooks/.;/admin", -1},
		{"https://hooks.test:9443/hooks/x/..;/..;/admin", -1},
		{"https://hooks.test:9443/hooks/x;jsessionid=1", -1},
		{"https://hooks.test:9443/hooks;/x", -1},
		{"https://hooks.test:9443/hooks/x;", -1},
		{"https://hooks.test:9443/hooks/..", -1},
		{"https://hooks.test:9443/hooks/.", -1},
		{"https://hooks.test:9443/hooks/./x", -1},
		{"https://hooks.test:9443/hooks/.../admin", -1},
		{"https://hooks.test:9443/hooks/%2e%2e/admin", -1},
		{"https://hooks.test:9443/hooks/%2E%2E/admin", -1},
		{"https://hooks.test:9443/hooks/.%2E/admin", -1},
		{"https://hooks.test:9443/hooks/%2e%2e%3b/admin", -1},
		{"https://hooks.test:9443/hooks/..%3B/admin", -1},
		{"https://hooks.test:9443/hooks/..%3b/admin", -1},
		{"https://hooks.test:9443/hooks/x%2F..%2F..%2Fadmin", -1},
		{"https://hooks.test:9443/hooks/x%2f..%2fadmin", -1},
		{"https://hooks.test:9443/hooks/x%5C..%5Cadmin", -1},
		{"https://hooks.test:9443/hooks/%252e%252e/admin", -1},
		{"https://hooks.test:9443/hooks/%252E%252E%252Fadmin", -1},
		{"https://hooks.test:9443/hooks/x%00/y", -1},
		{"https://hooks.test:9443/hooks/%C0%AE%C0%AE/admin", -1},
		{"https://hooks.test:9443/hooks/%EF%BC%8E%EF%BC%8E/admin", -1},
		{"https://hooks.test:9443/hooks/%61dmin", -1},
		{"https://hooks.test:9443/hooks/a%2", -1},
		{"https://hooks.test:9443/hooks/a%zz", -1},
		{"https://hooks.test:9443/hooks/a%20", 3},
		{"https://hooks.test:9443/hooks/a%2a", -1},
		{"https://hooks.test:9443/hooks//admin", -1},
		{"https://hooks.test:9443//hooks/x", -1},
		{"https://hooks.test:9443/hooks/x\\..\\admin", -1},
		{"https://hooks.test:9443/hooks/x{y}", -1},
		{"https://hooks.test:9443/hooks/x|y", -1},
		{"https://hooks.test:9443/hooks/x\"y", -1},
		{"https://hooks.test:9443/hooks/x?a=..;/admin", -1}, // no query in the glob
	} {
		_, rule, err := p.AuthorizeWebhook(c.url)
		switch {
		case c.rule < 0 && err == nil:
			t.Errorf("%s: allowed by %s, want refused", c.url, rule)
		case c.rule < 0 && !errors.Is(err, ErrEgressDenied):
			t.Errorf("%s: %v is not ErrEgressDenied", c.url, err)
		case c.rule >= 0 && (err != nil || rule.Index != c.rule || rule.Key != "webhooks"):
			t.Errorf("%s: rule %v err %v, want webhooks[%d]", c.url, rule, err, c.rule)
		}
	}
}

// FuzzAuthorizeWebhook: a path the webhooks globs accept means the same
// to a server that decodes it: decoding moves no segment boundary and
// yields no dot segment, no ';' path parameter, no '\\', '%' or NUL, and
// the path stays under the glob's prefix.
func FuzzAuthorizeWebhook(f *testing.F) {
	for _, s := range []string{"/hooks/a", "/hooks/..;/admin", "/hooks/%2e%2e/x", "/hooks/a%20b", "/hooks/%252e", "/hooks//x", "/hooks/a/"} {
		f.Add(s)
	}
	p := mustPolicy(f, Config{Webhooks: []string{"https://hooks.test/hooks/**"}})
	f.Fuzz(func(t *testing.T, path string) {
		tg, _, err := p.AuthorizeWebhook("https://hooks.test" + path)
		if err != nil {
			if !errors.Is(err, ErrEgressDenied) {
				t.Fatalf("%q: error %v is not ErrEgressDenied", path, err)
			}
			return
		}
		esc := tg.URL.EscapedPath()
		dec, err := url.PathUnescape(esc)
		if err != nil {
			t.Fatalf("%q: accepted path %q does not decode: %v", path, esc, err)
		}
		if strings.Count(dec, "/") != strings.Count(esc, "/") || strings.ContainsAny(dec, ";\\%\x00") {
			t.Fatalf("%q: accepted path %q decodes to %q", path, esc, dec)
		}
		for _, seg := range strings.Split(dec, "/")[1:] {
			if seg != "" && strings.Trim(seg, ".") == "" {
				t.Fatalf("%q: accepted path %q has the dot segment %q", path, esc, seg)
			}
		}
		if dec != "/hooks" && !strings.HasPrefix(dec, "/hooks/") {
			t.Fatalf("%q: accepted path %q is outside /hooks", path, esc)
		}
	})
}

func TestGlobMatch(t *testing.T) {
	for _, c := range []struct {
		pat, s string
		want   bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*", "abc", true}, {"*c", "abc", true},
		{"a*c", "ac", true}, {"a*c", "abd", false}, {"*a*a*a*b", strings.Repeat("a", 5000), false},
		{"x", "x", true}, {"x", "y", false}, {"a*b*c", "aXbYc", true},
	} {
		if got := globMatch(c.pat, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v", c.pat, c.s, got)
		}
	}
}

// FuzzParseURL: whatever the policy accepts has no userinfo, an ASCII
// lowercase host with no trailing dot that is a valid LDH name (or a
// listed IP literal), and a port the matching entry allows.
func FuzzParseURL(f *testing.F) {
	for _, c := range urlCases {
		f.Add(c.url)
	}
	p := mustPolicy(f, tableConfig)
	f.Fuzz(func(t *testing.T, s string) {
		tg, rule, err := p.AuthorizeURL(s)
		if err != nil {
			if !errors.Is(err, ErrEgressDenied) {
				t.Fatalf("%q: error %v is not ErrEgressDenied", s, err)
			}
			return
		}
		if tg.URL.User != nil {
			t.Fatalf("%q: userinfo survived", s)
		}
		if tg.Host == "" || strings.HasSuffix(tg.Host, ".") || tg.Host != strings.ToLower(tg.Host) {
			t.Fatalf("%q: host %q", s, tg.Host)
		}
		for i := 0; i < len(tg.Host); i++ {
			if tg.Host[i] >= 0x80 || tg.Host[i] <= ' ' {
				t.Fatalf("%q: non-ASCII host %q", s, tg.Host)
			}
		}
		entry := tableConfig.Hosts[rule.Index]
		if rule.Entry != entry {
			t.Fatalf("%q: rule %v", s, rule)
		}
		if a, err := netip.ParseAddr(tg.Host); err == nil {
			r, _ := parseHostRule(entry)
			if !r.ip.IsValid() || r.ip != a {
				t.Fatalf("%q: IP literal %s allowed by non-IP entry %q", s, a, entry)
			}
		} else if err := checkDNSName(tg.Host); err != nil || looksNumeric(tg.Host) {
			t.Fatalf("%q: host %q is not an LDH name", s, tg.Host)
		}
		r, _ := parseHostRule(entry)
		if r.port != 0 && tg.Port != r.port || r.port == 0 && tg.Port != 443 {
			t.Fatalf("%q: port %d not allowed by %q", s, tg.Port, entry)
		}
		if tg.URL.Host != tg.hostForURL() || strings.ContainsAny(tg.URL.String(), "\r\n\x00\\ ") {
			t.Fatalf("%q: normalized URL %q", s, tg.URL)
		}
	})
}

func TestCanonicalHeaderKeyMatchesNetHTTP(t *testing.T) {
	for _, h := range []string{"accept", "ACCEPT", "x-api-key", "X-API-KEY", "content-type", "a", "-x-", "x--y", "x1-y2", "If-None-Match"} {
		if got, want := CanonicalHeaderKey(h), http.CanonicalHeaderKey(h); got != want {
			t.Errorf("CanonicalHeaderKey(%q) = %q, net/http says %q", h, got, want)
		}
	}
}

func TestCheckHeaders(t *testing.T) {
	p := mustPolicy(t, Config{AllowedHeaders: []string{"Accept", "x-api-key"}})
	got, err := p.CheckHeaders(map[string]string{"accept": "a", "X-Api-Key": "k"})
	if err != nil || got["Accept"] != "a" || got["X-Api-Key"] != "k" {
		t.Fatalf("%v %v", got, err)
	}
	for _, h := range []map[string]string{
		{"accept": "a", "ACCEPT": "b"},
		{"Authorization": "x"},
		{"Accept": "a\r\nX: y"},
		{"Accept": "a\x00"},
		{"Acc ept": "a"},
	} {
		if _, err := p.CheckHeaders(h); !errors.Is(err, ErrEgressDenied) {
			t.Errorf("%q: %v", h, err)
		}
	}
	// Zero policy: nothing allowed, not even Accept.
	var zero Policy
	if _, err := zero.CheckHeaders(map[string]string{"Accept": "a"}); err == nil {
		t.Error("zero Policy allowed a header")
	}
	if _, _, err := zero.AuthorizeURL("https://api.github.com/"); err == nil {
		t.Error("zero Policy allowed a URL")
	}
}

// FuzzAuthorizeConnect: an accepted CONNECT authority names an LDH host
// (or a listed literal) and a port its entry allows.
func FuzzAuthorizeConnect(f *testing.F) {
	for _, s := range []string{"api.github.com:443", "a.example.com:443", "alt.example.org:8443", "192.0.2.10:443", "[2001:db8::10]:8443", "API.github.com.:443", "0x7f.1:443", "[::1]:443"} {
		f.Add(s)
	}
	p := mustPolicy(f, tableConfig)
	f.Fuzz(func(t *testing.T, s string) {
		tg, rule, err := p.AuthorizeConnect(s)
		if err != nil {
			if !errors.Is(err, ErrEgressDenied) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if tg.URL != nil || !tg.ExplicitPort || tg.Host != strings.ToLower(tg.Host) || strings.HasSuffix(tg.Host, ".") {
			t.Fatalf("%q: target %+v", s, tg)
		}
		r, _ := parseHostRule(tableConfig.Hosts[rule.Index])
		if r.ip.IsValid() != tg.IP.IsValid() || (r.port != 0 && tg.Port != r.port) || (r.port == 0 && tg.Port != 443) {
			t.Fatalf("%q: %+v allowed by %v", s, tg, rule)
		}
	})
}
