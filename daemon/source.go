//go:build linux

package daemon

import (
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
)

// source is where an allowed call's content came from (docs/api.md,
// "Provenance: source"), made in this one place for every operation: the
// tool, its operation, the policy and the call; the resource the result
// names (a file tool's path), or for an operation whose target is a URL
// (authz.Op.Network) that URL as the ledger records it (authz.RecordURL:
// query values by digest); then what the operation's own result knows
// beyond the decision (sourcer): a digest, a fetch's final URL.
func (c *call) source(res *api.CallResult, o *outcome) *api.Source {
	s := &api.Source{Tool: c.req.Tool, PolicyVersion: c.p.m.Version, CallID: c.id, Untrusted: true}
	if c.tool != nil {
		s.Operation = c.tool.Operation
	}
	if c.op != nil && c.op.Network() {
		if c.dec.Resource != nil && c.dec.Resource.Path != "" {
			s.URL = authz.RecordURL(c.dec.Resource.Path)
		}
	} else {
		s.Resource = res.Resource
	}
	if sr, ok := o.result.(sourcer); ok {
		sr.source(s)
	}
	if o.redacted.Total() > 0 {
		// A digest of what was read before its secrets were replaced
		// would let a guess at a short secret be checked offline.
		s.SHA256 = ""
	}
	return s
}

// sourcer is an operation's result (opResult) that knows more of where
// the call's content came from than its decision does.
type sourcer interface {
	// source fills in what the operation knows: the content's digest, a
	// fetch's or post's final URL after its redirects.
	source(s *api.Source)
}
