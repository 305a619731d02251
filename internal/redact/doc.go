// Package redact bounds and redacts what an agent can put into a ledger
// record (docs/audit.md, "What the ledger keeps of untrusted text"):
// every string is cut to a bound with a marker that gives its length and
// the sha256 of the whole, and a URL's query and fragment values are
// replaced by short digests, since API keys travel in query strings.
//
// It is pure and a leaf on the standard library: authz records a fetch's
// URL with it, the daemon a proxied connection's fields, egress nothing.
package redact
