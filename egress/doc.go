// Package egress performs sluice's network operations — fetch (GET/HEAD),
// post (a JSON body to a webhook) and a forward proxy for a command's
// allowlisted connections — as a library that knows nothing of the daemon.
// Its pure half (URL parsing, the policy and its decisions, address
// classification) is package egress/netpolicy, which authz and replay can
// import; this package adds what touches the network: one lookup, the
// pinned dial, the requests and the proxy. docs/egress.md describes the
// policy semantics; docs/design.md §1 step 8 places it in a call.
//
// # The address is the resource
//
// File tools never authorize a path string and later open it by name: the
// kernel resolves the path beneath a held root fd (openat2) and the call
// acts on that fd. egress applies the same rule to the network:
//
//  1. Parse. netpolicy.ParseURL turns the untrusted string into a Target, refusing
//     every form whose meaning depends on who parses it — userinfo, IP
//     literals in any non-canonical encoding (2130706433, 0x7f.1),
//     trailing dots, percent-encoded or non-ASCII hosts, backslashes,
//     CR/LF/NUL — by parsing, never by string matching on the raw URL.
//  2. Authorize. netpolicy.Policy.Authorize matches the Target's lowercase ASCII
//     host and port against the hosts entries and its scheme against the
//     schemes (Policy.AuthorizeWebhook: the webhooks globs); the matched
//     Rule goes to the audit. For a fetch or post, Policy.AuthorizeFetch
//     and AuthorizePost make the whole first request once (a
//     netpolicy.Request: the Target, the rule, the method, the headers
//     checked), which is what Client.Fetch and Client.Post send.
//  3. Resolve once. Client.Resolve looks the name up ONCE and checks
//     every address of the answer (Client.CheckAddrs): loopback, private,
//     link-local, CGNAT, multicast, unspecified, documentation, reserved
//     and the IPv6 forms that carry such an IPv4 address are refused
//     (netpolicy.CheckAddrs), and so is every address the host itself
//     owns, whatever its range (HostOwns asks the kernel's routing at the
//     check), unless the policy says insecure_allow_private. One bad
//     address refuses the whole answer (DNS rebinding mixes a public and
//     a private address). The same check guards each redirect hop and the
//     proxy's dials. A fetch's or post's first request goes to the address
//     the daemon looked up once (Lookup) and decided on (the classes); only
//     the routes are asked about it before the dial (CheckRoutes), and
//     nothing is looked up again.
//  4. Dial the checked address. The pinned dialer connects to exactly the
//     address Resolve returned — the "fd" of the network — with no second
//     lookup, so an answer that changes between the check and the connect
//     is never consulted. TLS is still verified against the host NAME, and
//     proxy environment variables are ignored.
//  5. Re-authorize each hop. A redirect's Location is a new untrusted URL:
//     it goes through 1-4 before anything is sent to it.
//
// Errors: refusals match netpolicy.ErrEgressDenied (*netpolicy.DeniedError),
// failures of an allowed request (resolve, connect, TLS, timeout) match
// ErrUpstream (*UpstreamError), malformed requests match
// netpolicy.ErrInvalidRequest; each carries its stable reason code
// (egress_denied, upstream_error, invalid_args, cancelled), which
// errclass.Reason finds.
//
// The package builds everywhere; only HostOwns is Linux's (an rtnetlink
// route lookup, golang.org/x/sys/unix), with an interface-list twin
// elsewhere. The daemon serves the Proxy on a TCP listener it makes inside
// a command's network namespace (127.0.0.1:3128 there; docs/sandbox.md).
package egress
