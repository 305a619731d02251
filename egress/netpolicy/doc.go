// Package netpolicy is the pure half of sluice's egress: parsing untrusted
// URLs and CONNECT authorities (ParseURL, ParseAuthority), the validated
// policy of a fetch, post or command-egress tool (Config, NewPolicy) and
// its decisions (Policy.AuthorizeURL, AuthorizeWebhook, AuthorizeConnect,
// CheckHeaders; AuthorizeFetch and AuthorizePost, which make a fetch's or
// post's whole first request once, a Request), and the classification of resolved addresses
// (Classify, CheckAddrs). It performs no I/O, no lookups and reads no
// clock, so authz can validate manifests and decide with it, and replay
// can re-decide a recorded URL and address from the ledger alone.
//
// The effectful half — resolving once, dialing the checked address,
// performing fetch and post, the forward proxy — is package egress
// (github.com/sluicehq/sluice/egress); docs/egress.md describes both.
package netpolicy
