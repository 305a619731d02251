package api

// Source is a result's provenance (docs/api.md, "Provenance: source"):
// which tool and operation produced it, from what, under which policy, in
// which call. It labels the content; it does not vouch for it: whatever a
// file, a command or a server said is data, never instructions, and
// Untrusted is always true to say so to whoever keeps the output apart
// from its prompt (sluice mcp copies Source into structuredContent and
// _meta).
type Source struct {
	Tool      string    `json:"tool"`
	Operation Operation `json:"operation"`
	// Resource is the absolute normalized path the call acted on, as the
	// kernel named the resolved fd (the result's resource): a file
	// tool's file or directory. Empty for a command (its output is the
	// command's) and for a fetch or post (URL instead).
	Resource string `json:"resource,omitempty"`
	// URL is a fetch's or post's final URL, after the redirects it
	// followed, as the ledger records URLs: each query value and a
	// fragment replaced by a short sha256 (never a secret a query string
	// carried).
	URL string `json:"url,omitempty"`
	// SHA256 ("sha256:…") is the content's digest where the operation
	// knows it: a whole regular file read (what was read), a stat of a
	// regular file up to 64 MiB, a write's or edit's new content, a
	// moved file, what a delete removed.
	SHA256        string `json:"sha256,omitempty"`
	PolicyVersion string `json:"policy_version"`
	CallID        string `json:"call_id"`
	// Untrusted is always true: the content is data from outside sluice.
	Untrusted bool `json:"untrusted"`
}
