package egress

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/egress/netpolicy"
)

// Credentials are a fetch or post tool's credential values, by the
// credentials key the manifest wrote (docs/egress.md, "Credentials"),
// read by the daemon from each value_file when the manifest loads. Which
// host gets which header is the tool's policy's (netpolicy.Policy.
// Credential); the value is added to a request here, on each hop to that
// host and no other, and scrubbed from everything the server sends back.
// A Credentials never prints its values.
type Credentials struct {
	values map[string]string
	scrub  *scrubber
}

// Bounds of a credential's value: a header line's, and, below it, too
// short to tell from ordinary text (every response would be scrubbed
// into noise, and the value guessed from what was scrubbed).
const (
	MaxCredentialBytes    = 8192
	MinCredentialSecret   = 8
	credentialLengthError = "is %d bytes; a credential's secret part must be %d to %d bytes"
)

// NewCredentials checks each value (a header value: no CR, LF, NUL or
// other control byte; its secret part, after an auth scheme such as
// "Bearer ", at least MinCredentialSecret bytes) and readies their
// scrubbing. Errors name the key, never the value.
func NewCredentials(values map[string]string) (*Credentials, error) {
	c := &Credentials{values: map[string]string{}}
	var needles []string
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := values[k]
		if err := netpolicy.CheckHeader("X", v); err != nil || v != strings.TrimSpace(v) {
			return nil, fmt.Errorf("%s: the value holds a control byte, or leading or trailing space (only one trailing newline is trimmed)", k)
		}
		secret := secretPart(v)
		if len(secret) < MinCredentialSecret || len(v) > MaxCredentialBytes {
			return nil, fmt.Errorf("%s: the value "+credentialLengthError, k, len(secret), MinCredentialSecret, MaxCredentialBytes)
		}
		c.values[k] = v
		needles = append(needles, echoesOf(v)...)
		if secret != v {
			needles = append(needles, echoesOf(secret)...)
		}
	}
	c.scrub = newScrubber(needles)
	return c, nil
}

// secretPart is the value after its auth scheme ("Bearer abc…" -> "abc…",
// "Basic dXNl…" -> "dXNl…"): what a server is as likely to echo alone.
func secretPart(v string) string {
	if _, rest, ok := strings.Cut(v, " "); ok && strings.TrimSpace(rest) != "" {
		return strings.TrimSpace(rest)
	}
	return v
}

// echoesOf are the forms a value is scrubbed in: as sent, and escaped as
// a URL's query or path would carry it (a server that puts it in a
// Location, or quotes the request line).
func echoesOf(v string) []string {
	out := []string{v}
	for _, e := range []string{url.QueryEscape(v), url.PathEscape(v)} {
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out
}

// String never shows a value.
func (c *Credentials) String() string {
	if c == nil {
		return "credentials(none)"
	}
	return fmt.Sprintf("credentials(%d)", len(c.values))
}

// GoString never shows a value either (%#v).
func (c *Credentials) GoString() string { return c.String() }

// add sets, on a copy of hdr, the header the policy names for t's host,
// with its value; hdr itself when it names none. A credential the policy
// names but c lacks fails closed: the request is not sent.
func (c *Credentials) add(p *netpolicy.Policy, t *netpolicy.Target, hdr http.Header) (http.Header, error) {
	key, name, ok := p.Credential(t)
	if !ok {
		return hdr, nil
	}
	v, have := "", false
	if c != nil {
		v, have = c.values[key]
	}
	if !have {
		return nil, denied("%s: no credential value loaded for it", t.Host)
	}
	h := hdr.Clone()
	h.Set(name, v)
	return h, nil
}

// scrubber is c's, nil when c is nil.
func (c *Credentials) scrubber() *scrubber {
	if c == nil {
		return nil
	}
	return c.scrub
}

// scrubResult replaces every value echoed in what the result and err say
// (the final URL and each hop's, which the ledger records, the content
// type, which the agent gets, and the error's text, which is logged).
// The body was scrubbed as it was read (readBody).
func (c *Credentials) scrubResult(res *Result, err error) (*Result, error) {
	s := c.scrubber()
	if s == nil {
		return res, err
	}
	if res != nil {
		var n int
		res.URL, n = s.String(res.URL)
		res.Redacted += n
		res.ContentType, n = s.String(res.ContentType)
		res.Redacted += n
		for i := range res.Hops {
			res.Hops[i].URL, n = s.String(res.Hops[i].URL)
			res.Redacted += n
		}
	}
	if err != nil {
		if text, n := s.String(err.Error()); n > 0 {
			err = &scrubbedError{text: text, err: err}
		}
	}
	return res, err
}

// scrubbedError is an error whose text echoed a credential: its text
// scrubbed, its chain kept for classification (errclass finds the reason
// through Unwrap). Whoever prints it prints the scrubbed text; nothing in
// sluice prints an error it unwrapped from it.
type scrubbedError struct {
	text string
	err  error
}

func (e *scrubbedError) Error() string { return e.text }
func (e *scrubbedError) Unwrap() error { return e.err }
