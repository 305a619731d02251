package netpolicy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// classifyCases is the address table: every refused range (its first and
// last address where the edge matters) and the globally reachable
// addresses just outside them. The documentation, benchmarking and
// reserved rows are docs/security.md "The third review" (egress reached a
// service on the host's own 192.0.2.2).
var classifyCases = []struct {
	addr, class string
}{
	// IPv4: the IANA special-purpose registry's not globally reachable.
	{"0.0.0.0", "this-network"},
	{"0.1.2.3", "this-network"},
	{"0.255.255.255", "this-network"},
	{"10.0.0.0", "private"},
	{"10.1.2.3", "private"},
	{"10.255.255.255", "private"},
	{"100.64.0.0", "cgnat"},
	{"100.64.0.1", "cgnat"},
	{"100.127.255.255", "cgnat"},
	{"127.0.0.1", "loopback"},
	{"127.255.255.254", "loopback"},
	{"169.254.169.254", "link-local"},
	{"169.254.0.0", "link-local"},
	{"172.16.0.1", "private"},
	{"172.31.255.255", "private"},
	{"192.0.0.0", "ietf-protocol"},
	{"192.0.0.8", "ietf-protocol"},
	{"192.0.0.255", "ietf-protocol"},
	{"192.0.2.0", "documentation"},
	{"192.0.2.2", "documentation"},
	{"192.0.2.255", "documentation"},
	{"192.88.99.1", "6to4-relay"},
	{"192.168.1.1", "private"},
	{"198.18.0.0", "benchmarking"},
	{"198.18.0.1", "benchmarking"},
	{"198.19.255.255", "benchmarking"},
	{"198.51.100.0", "documentation"},
	{"198.51.100.1", "documentation"},
	{"198.51.100.255", "documentation"},
	{"203.0.113.0", "documentation"},
	{"203.0.113.7", "documentation"},
	{"203.0.113.255", "documentation"},
	{"224.0.0.1", "multicast"},
	{"239.255.255.250", "multicast"},
	{"240.0.0.1", "reserved"},
	{"254.255.255.255", "reserved"},
	{"255.255.255.254", "reserved"},
	{"255.255.255.255", "broadcast"},
	// IPv6.
	{"::", "unspecified"},
	{"::1", "loopback"},
	{"100::", "discard"},
	{"100::ffff:ffff:ffff:ffff", "discard"},
	{"100:0:0:1::1", "dummy-prefix"},
	{"64:ff9b:1::1", "local-nat64"},
	{"2001:0:4136:e378::1", "teredo"},
	{"2001:1::1", "ietf-protocol"},
	{"2001:2::", "benchmarking"},
	{"2001:2:0:ffff:ffff:ffff:ffff:ffff", "benchmarking"},
	{"2001:3::1", "ietf-protocol"},
	{"2001:4:112::1", "ietf-protocol"},
	{"2001:10::1", "orchid"},
	{"2001:20::1", "ietf-protocol"},
	{"2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", "ietf-protocol"},
	{"2001:db8::", "documentation"},
	{"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "documentation"},
	{"3fff::", "documentation"},
	{"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "documentation"},
	{"5f00::1", "srv6-sid"},
	{"fc00::1", "private"},
	{"fd12:3456::1", "private"},
	{"fe80::1", "link-local"},
	{"fec0::1", "site-local"},
	{"ff02::1", "multicast"},
	{"ff0e::1", "multicast"},
	{"fe80::1%eth0", "scoped"},
	// Outside 2000::/3 and no IPv4 form: what the IETF has not assigned.
	{"::1:0:0:0", "reserved"},
	{"1::1", "reserved"},
	{"4000::1", "reserved"},
	{"e000::1", "reserved"},
	{"::ffff:0:808:808", "reserved"}, // SIIT ::ffff:0:a.b.c.d
	{"::8.8.8.8", "reserved"},        // IPv4-compatible: deprecated
	// IPv4 inside IPv6: judged by the IPv4 address.
	{"::ffff:127.0.0.1", "loopback"},
	{"::ffff:10.0.0.1", "private"},
	{"::ffff:169.254.169.254", "link-local"},
	{"::ffff:192.0.2.2", "documentation"},
	{"::127.0.0.1", "loopback (embedded)"},
	{"64:ff9b::7f00:1", "loopback (embedded)"},
	{"64:ff9b::a9fe:a9fe", "link-local (embedded)"},
	{"64:ff9b::c000:202", "documentation (embedded)"},
	{"2002:7f00:1::", "loopback (6to4)"},
	{"2002:c0a8:101::1", "private (6to4)"},
	{"2002:cb00:7107::", "documentation (6to4)"},
	// Globally reachable, some just outside a refused range: not refused.
	{"8.8.8.8", ""},
	{"1.1.1.1", ""},
	{"172.32.0.1", ""},
	{"100.63.255.255", ""},
	{"100.128.0.1", ""},
	{"192.0.1.255", ""},
	{"192.0.3.0", ""},
	{"198.17.255.255", ""},
	{"198.20.0.0", ""},
	{"198.51.99.255", ""},
	{"198.51.101.0", ""},
	{"203.0.112.255", ""},
	{"203.0.114.0", ""},
	{"223.255.255.255", ""},
	{"2606:4700::1111", ""},
	{"2001:200::1", ""},
	{"2001:db7:ffff::1", ""},
	{"2001:db9::1", ""},
	{"3fff:1000::1", ""},
	{"3ffe:ffff::1", ""},
	{"::ffff:8.8.8.8", ""},
	{"64:ff9b::808:808", ""},
	{"2002:808:808::", ""},
}

func TestClassify(t *testing.T) {
	for _, c := range classifyCases {
		a := netip.MustParseAddr(c.addr)
		if got := Classify(a); got != c.class {
			t.Errorf("Classify(%s) = %q, want %q", c.addr, got, c.class)
		}
	}
}

func TestCheckAddrs(t *testing.T) {
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, x := range s {
			out = append(out, netip.MustParseAddr(x))
		}
		return out
	}
	// Rebinding: the first answer is public, the second loopback. The
	// answer as a whole is refused, naming the bad address.
	_, err := CheckAddrs(addrs("8.8.8.8", "127.0.0.1"), false)
	if !errors.Is(err, ErrEgressDenied) || !strings.Contains(err.Error(), "127.0.0.1 is loopback") {
		t.Fatalf("rebinding answer: %v", err)
	}
	_, err = CheckAddrs(addrs("8.8.8.8", "::ffff:169.254.169.254"), false)
	if !errors.Is(err, ErrEgressDenied) {
		t.Fatalf("mapped metadata address: %v", err)
	}
	a, err := CheckAddrs(addrs("8.8.8.8", "1.1.1.1"), false)
	if err != nil || a != netip.MustParseAddr("8.8.8.8") {
		t.Fatalf("public answer: %v %v", a, err)
	}
	a, err = CheckAddrs(addrs("::ffff:8.8.8.8"), false)
	if err != nil || a != netip.MustParseAddr("8.8.8.8") {
		t.Fatalf("mapped public answer is dialed unmapped: %v %v", a, err)
	}
	if _, err := CheckAddrs(nil, true); !errors.Is(err, ErrEgressDenied) {
		t.Fatalf("empty answer: %v", err)
	}
	// The opt-in admits loopback and private, never unspecified.
	if _, err := CheckAddrs(addrs("127.0.0.1", "10.0.0.1", "::1"), true); err != nil {
		t.Fatalf("insecure_allow_private: %v", err)
	}
	for _, bad := range []string{"0.0.0.0", "::", "fe80::1%eth0"} {
		if _, err := CheckAddrs(addrs(bad), true); !errors.Is(err, ErrEgressDenied) {
			t.Errorf("insecure_allow_private admitted %s", bad)
		}
	}
}
