package netpolicy

import (
	"strings"
	"testing"
)

// TestCredentialsConfig: a credential names one exact host the tool may
// reach, and a header that can carry it; each error names the entry.
func TestCredentialsConfig(t *testing.T) {
	fetch := func(creds map[string]string) Config {
		return Config{Hosts: []string{"api.example.com", "*.cdn.example.com", "10.0.0.1:8443"}, Schemes: []string{"https", "http"}, Credentials: creds}
	}
	post := func(creds map[string]string) Config {
		return Config{Webhooks: []string{"https://hooks.example.com/in/*"}, Credentials: creds}
	}
	for _, c := range []struct {
		name string
		c    Config
		want string // "" when valid
	}{
		{"fetch host", fetch(map[string]string{"api.example.com": "Authorization"}), ""},
		{"fetch host, default port", fetch(map[string]string{"api.example.com:443": "Authorization"}), ""},
		{"a name beneath a wildcard entry", fetch(map[string]string{"a.cdn.example.com": "X-Api-Key"}), ""},
		{"IP literal with its port", fetch(map[string]string{"10.0.0.1:8443": "Authorization"}), ""},
		{"post webhook host", post(map[string]string{"hooks.example.com": "X-Hook-Token"}), ""},
		{"not in hosts", fetch(map[string]string{"evil.example.com": "Authorization"}), "credentials.evil.example.com: not a host this tool may reach; add it to hosts"},
		{"port not allowed", fetch(map[string]string{"api.example.com:8443": "Authorization"}), "credentials.api.example.com:8443: not a host"},
		{"IP without its port", fetch(map[string]string{"10.0.0.1": "Authorization"}), "credentials.10.0.0.1: not a host"},
		{"not a webhook host", post(map[string]string{"api.example.com": "Authorization"}), "add it to a webhook's host"},
		{"wildcard", fetch(map[string]string{"*.cdn.example.com": "Authorization"}), "no wildcard"},
		{"upper case", fetch(map[string]string{"API.example.com": "Authorization"}), "lowercase"},
		{"path", fetch(map[string]string{"api.example.com/x": "Authorization"}), "credentials.api.example.com/x"},
		{"Host header", fetch(map[string]string{"api.example.com": "host"}), "cannot carry a credential"},
		{"Content-Type", fetch(map[string]string{"api.example.com": "Content-Type"}), "cannot carry a credential"},
		{"Proxy-Authorization", fetch(map[string]string{"api.example.com": "Proxy-Authorization"}), "cannot carry a credential"},
		{"bad header name", fetch(map[string]string{"api.example.com": "Auth orization"}), "not a header name"},
		{"empty header", fetch(map[string]string{"api.example.com": ""}), "not a header name"},
		{"twice", fetch(map[string]string{"api.example.com": "Authorization", "api.example.com:443": "X-Api-Key"}), "names the same host and port"},
	} {
		_, err := NewPolicy(c.c)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

// TestCredentialMatch: a credential matches its host exactly and its
// port (the scheme's default when it names none); never another name, a
// name beneath it, another port, or a CONNECT authority.
func TestCredentialMatch(t *testing.T) {
	p := mustPolicy(t, Config{
		Hosts:       []string{"api.example.com", "api.example.com:8443", "x.api.example.com", "[2001:db8::1]:9000"},
		Schemes:     []string{"https", "http"},
		Credentials: map[string]string{"api.example.com": "authorization", "[2001:db8::1]:9000": "x-api-key"},
	})
	for _, c := range []struct {
		url, header string
	}{
		{"https://api.example.com/a", "Authorization"},
		// Never in clear text while the tool may use https: an agent's
		// http:// URL, or a redirect down to http on the same host, goes
		// without it.
		{"http://api.example.com/a", ""},
		{"https://api.example.com:443/a", "Authorization"},
		{"https://api.example.com:8443/a", ""},
		{"http://api.example.com:443/a", ""},
		{"https://x.api.example.com/a", ""},
		{"https://[2001:db8::1]:9000/", "X-Api-Key"},
		{"https://[2001:db8::1]/", ""},
	} {
		tg, err := ParseURL(c.url)
		if err != nil {
			t.Fatal(err)
		}
		_, h, ok := p.Credential(tg)
		if h != c.header || ok != (c.header != "") {
			t.Errorf("%s: %q %v, want %q", c.url, h, ok, c.header)
		}
	}
	// A tool that may use plain http only (a loopback service) sends it
	// there: the operator chose no https.
	plain := mustPolicy(t, Config{Hosts: []string{"127.0.0.1:8080"}, Schemes: []string{"http"},
		Credentials: map[string]string{"127.0.0.1:8080": "authorization"}})
	if tg, err := ParseURL("http://127.0.0.1:8080/a"); err != nil {
		t.Fatal(err)
	} else if _, h, ok := plain.Credential(tg); !ok || h != "Authorization" {
		t.Errorf("an http-only tool's credential: %q %v", h, ok)
	}
	tg, err := ParseAuthority("api.example.com:443")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := p.Credential(tg); ok {
		t.Error("a CONNECT authority matched a credential")
	}
}
