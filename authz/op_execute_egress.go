package authz

import (
	"fmt"
	"strings"
)

// ExecEgress is an execute tool's "egress" key: the connections its
// commands may make through sluiced's forward proxy (docs/sandbox.md,
// "Egress for commands"). Its entries mean what the egress package says
// (docs/egress.md); the daemon builds the policy at load, and its errors
// name tools.NAME.egress.KEY.
type ExecEgress struct {
	Hosts   []string `json:"hosts,omitempty" toml:"hosts"`
	Schemes []string `json:"schemes,omitempty" toml:"schemes"`
	// MaxBytesOut caps what one connection may send upstream (0: no cap).
	MaxBytesOut int64 `json:"max_bytes_out,omitempty" toml:"max_bytes_out"`
	// InsecureAllowPrivate admits loopback, private, link-local, …
	// addresses (tests against local servers only).
	InsecureAllowPrivate bool `json:"insecure_allow_private,omitempty" toml:"insecure_allow_private"`
	// Credentials is refused, with why: the proxy relays TLS it cannot
	// read (docs/egress.md, "Credentials").
	Credentials any `json:"credentials,omitempty" toml:"credentials"`
}

// ProxyEnv are the variables egress sets in a command's environment; the
// manifest's env may not set them too.
var ProxyEnv = []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}

// validateEgress is the structural check of egress; netpolicy.NewPolicy
// checks each entry's meaning when the daemon loads the manifest.
func validateEgress(key string, t *Tool) error {
	e := t.Egress
	if e == nil {
		return nil
	}
	k := key + ".egress"
	if len(e.Hosts) == 0 {
		return merr(k+".hosts", "missing or empty; list the hosts commands may reach, e.g. [\"pypi.org\", \"files.pythonhosted.org\"], or remove egress for no network")
	}
	for i, h := range e.Hosts {
		if h == "" || strings.ContainsAny(h, " \t\r\n\x00") {
			return merr(fmt.Sprintf("%s.hosts[%d]", k, i), "%q is empty or contains a space, a control character or NUL", h)
		}
	}
	for i, s := range e.Schemes {
		if s == "" || strings.ContainsAny(s, " \t\r\n\x00") {
			return merr(fmt.Sprintf("%s.schemes[%d]", k, i), "%q is empty or contains a space, a control character or NUL", s)
		}
	}
	if e.Credentials != nil {
		return merr(k+".credentials", "the command proxy relays HTTPS it cannot read, so it cannot add a header without terminating TLS; give the credential to a fetch or post tool instead (docs/egress.md, \"Credentials\"), or remove it")
	}
	if e.MaxBytesOut < 0 {
		return merr(k+".max_bytes_out", "is %d; use a positive byte count, or omit it for no cap", e.MaxBytesOut)
	}
	for _, v := range ProxyEnv {
		if _, ok := t.Env[v]; ok {
			return merr(key+".env."+v, "is set by egress (it points at sluiced's proxy); remove it")
		}
	}
	return nil
}
