package netpolicy

import (
	"net/netip"
)

// refusedV4 are the IPv4 ranges that reach this machine, its local
// networks, a network nobody may route, or nothing at all: every range
// the IANA IPv4 Special-Purpose Address Registry lists as not globally
// reachable. An agent-controlled name (or a DNS answer it controls)
// pointing there is server-side request forgery: the metadata service at
// 169.254.169.254, a database on 10.0.0.5, sluiced's own neighbours on
// 127.0.0.1.
//
// The documentation ranges (192.0.2/24, 198.51.100/24, 203.0.113/24) are
// refused too: "routed nowhere" holds on the internet, not on every host —
// a lab or CI machine may number its own interfaces from them (the third
// review's VM had eth0 192.0.2.2/24), and a service bound to 0.0.0.0
// answers there (docs/security.md "The third review"). 198.18/15 is
// refused because fake-IP DNS proxies hand it out for local forwarding.
// An address of one of the host's own interfaces outside these ranges is
// refused by the egress package, which asks the kernel (HostOwns): that
// answer depends on the machine, so it is no class.
var refusedV4 = []struct {
	prefix netip.Prefix
	class  string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "cgnat"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "ietf-protocol"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4-relay"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
}

// refusedV6 are the IPv6 ranges of the IANA IPv6 Special-Purpose Address
// Registry that are not globally reachable, with the more specific entry
// first (its class names the refusal). Whatever lies outside 2000::/3,
// the only global unicast space, is refused as "reserved" after the
// IPv4-carrying forms are judged by their IPv4 address (Classify).
var refusedV6 = []struct {
	prefix netip.Prefix
	class  string
}{
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("100::/64"), "discard"},
	{netip.MustParsePrefix("100:0:0:1::/64"), "dummy-prefix"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-nat64"},
	{netip.MustParsePrefix("2001::/32"), "teredo"}, // embeds an obfuscated IPv4 we do not chase
	{netip.MustParsePrefix("2001:2::/48"), "benchmarking"},
	{netip.MustParsePrefix("2001:10::/28"), "orchid"},
	// The rest of the IETF protocol assignments; the few anycast services
	// in it that are globally reachable (PCP, TURN, AS112, ORCHIDv2) are
	// nothing a fetch needs.
	{netip.MustParsePrefix("2001::/23"), "ietf-protocol"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
	{netip.MustParsePrefix("5f00::/16"), "srv6-sid"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

var (
	v4Compat      = netip.MustParsePrefix("::/96")
	nat64         = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour     = netip.MustParsePrefix("2002::/16")
	globalUnicast = netip.MustParsePrefix("2000::/3")
)

// Classify returns why an address is refused ("loopback", "private",
// "link-local", "cgnat", "multicast", "documentation", ...), or "" for a
// globally reachable address.
// IPv6 forms that carry an IPv4 address — IPv4-mapped (::ffff:a.b.c.d),
// IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::a.b.c.d) and 6to4
// (2002:aabb:ccdd::) — are judged by the IPv4 address they carry, so
// [::ffff:127.0.0.1] is loopback: a dual-stack socket or a NAT64 gateway
// delivers them there.
func Classify(a netip.Addr) string {
	if !a.IsValid() {
		return "invalid"
	}
	if a.Zone() != "" {
		return "scoped"
	}
	if a.Is4In6() {
		return classify4(a.Unmap())
	}
	if a.Is4() {
		return classify4(a)
	}
	for _, r := range refusedV6 {
		if r.prefix.Contains(a) {
			return r.class
		}
	}
	b := a.As16()
	switch {
	case v4Compat.Contains(a), nat64.Contains(a):
		if c := classify4(netip.AddrFrom4([4]byte(b[12:16]))); c != "" {
			return c + " (embedded)"
		}
		if nat64.Contains(a) {
			return "" // a public IPv4 address through a DNS64/NAT64 gateway
		}
	case sixToFour.Contains(a):
		if c := classify4(netip.AddrFrom4([4]byte(b[2:6]))); c != "" {
			return c + " (6to4)"
		}
	}
	if !globalUnicast.Contains(a) {
		// ::a.b.c.d (deprecated), ::ffff:0:a.b.c.d and every range
		// the IETF has not assigned.
		return "reserved"
	}
	return ""
}

func classify4(a netip.Addr) string {
	for _, r := range refusedV4 {
		if r.prefix.Contains(a) {
			return r.class
		}
	}
	return ""
}

// CheckAddrs checks every address a name resolved to and returns the one
// to dial. If ANY address is refused the name is refused: a name whose
// answer mixes a public address with 127.0.0.1 is a DNS-rebinding setup
// (the client may connect to either), so the answer as a whole is the
// resource. allowPrivate (insecure_allow_private) skips the classes but
// never accepts an invalid, scoped or unspecified address.
func CheckAddrs(addrs []netip.Addr, allowPrivate bool) (netip.Addr, error) {
	if len(addrs) == 0 {
		return netip.Addr{}, denied("name resolved to no address")
	}
	for _, a := range addrs {
		c := Classify(a)
		if c == "" {
			continue
		}
		if allowPrivate && c != "invalid" && c != "scoped" && c != "unspecified" && c != "this-network" {
			continue
		}
		return netip.Addr{}, denied("address %s is %s", a, c)
	}
	return addrs[0].Unmap(), nil
}
