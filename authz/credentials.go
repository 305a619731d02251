package authz

import (
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// Credential is one entry of a fetch or post tool's "credentials" key
// (docs/manifest.md, "credentials"): the header sluiced adds to every
// request to the entry's host, its value read by the daemon from
// ValueFile when the manifest loads. The manifest, and so authz, never
// holds the value: the agent never holds it either (docs/security.md,
// "Credentials the agent never holds").
type Credential struct {
	Header    string `json:"header" toml:"header"`
	ValueFile string `json:"value_file" toml:"value_file"`
}

// validateCredentials is the structural check of credentials; which host
// an entry may name, and its header, are checked with the tool's network
// policy (validateNet, netpolicy.NewPolicy), and its value_file by the
// daemon when it reads it.
func validateCredentials(key string, t *Tool) error {
	for _, host := range sortedKeys(t.Credentials) {
		c := t.Credentials[host]
		k := key + ".credentials." + host
		switch {
		case c == nil:
			return merr(k, "is null; give it {\"header\": \"Authorization\", \"value_file\": \"/etc/sluice/secrets/NAME\"}")
		case c.Header == "":
			return merr(k+".header", "missing; name the header that carries the credential, e.g. \"Authorization\"")
		case c.ValueFile == "":
			return merr(k+".value_file", "missing; name the root-owned file (mode 0600 or 0640) that holds the header's value")
		case !filepath.IsAbs(c.ValueFile) || filepath.Clean(c.ValueFile) != c.ValueFile || strings.ContainsRune(c.ValueFile, 0):
			return merr(k+".value_file", "%q: use an absolute, clean path, e.g. \"/etc/sluice/secrets/NAME\"", c.ValueFile)
		}
	}
	return nil
}

// credentialHeaders is what validateNet gives the network policy: host ->
// header name.
func credentialHeaders(t *Tool) map[string]string {
	if len(t.Credentials) == 0 {
		return nil
	}
	m := make(map[string]string, len(t.Credentials))
	for host, c := range t.Credentials {
		m[host] = c.Header
	}
	return m
}

// showCredential tells an approver that sluiced adds a credential to the
// request (its header and host, never its value).
func showCredential(t *Tool, u *string, parsed *parsedURL, ch *api.ApprovalChange) {
	if t.net == nil || u == nil {
		return
	}
	tg, err := parsed.of(u)
	if err != nil || tg == nil {
		return
	}
	if _, name, ok := t.net.Credential(tg); ok {
		ch.Summary = append(ch.Summary, api.ChangeField{Label: "credential", Value: name + " for " + tg.Host + ", added by sluiced (its value is not shown)"})
	}
}

// credentialNote tells the agent, in a fetch tool's schema, which headers
// sluiced adds itself (and so refuses from it), never their values.
func credentialNote(t *Tool) string {
	var notes []string
	for _, host := range sortedKeys(t.Credentials) {
		if c := t.Credentials[host]; c != nil {
			notes = append(notes, c.Header+" for "+host)
		}
	}
	if len(notes) == 0 {
		return ""
	}
	return ". sluiced adds " + strings.Join(notes, ", ") + " itself; do not set it"
}
