package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		addr, class string
	}{
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"169.254.169.254", "link-local"},
		{"100.64.0.1", "cgnat"},
		{"100.127.255.255", "cgnat"},
		{"0.0.0.0", "this-network"},
		{"0.1.2.3", "this-network"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"255.255.255.255", "reserved"},
		{"240.0.0.1", "reserved"},
		{"198.18.0.1", "benchmarking"},
		{"192.0.0.8", "ietf-protocol"},
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"fe80::1", "link-local"},
		{"fc00::1", "private"},
		{"fd12:3456::1", "private"},
		{"ff02::1", "multicast"},
		{"fec0::1", "site-local"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:10.0.0.1", "private"},
		{"::ffff:169.254.169.254", "link-local"},
		{"::127.0.0.1", "loopback (embedded)"},
		{"64:ff9b::7f00:1", "loopback (embedded)"},
		{"64:ff9b::a9fe:a9fe", "link-local (embedded)"},
		{"64:ff9b:1::1", "local-nat64"},
		{"2002:7f00:1::", "loopback (6to4)"},
		{"2002:c0a8:101::1", "private (6to4)"},
		{"2001:0:4136:e378::1", "teredo"},
		{"fe80::1%eth0", "scoped"},
		// Public, or routed nowhere (documentation): not refused.
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"172.32.0.1", ""},
		{"100.128.0.1", ""},
		{"203.0.113.7", ""},
		{"198.51.100.1", ""},
		{"2606:4700::1111", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""},
		{"2002:808:808::", ""},
	} {
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
	_, err := CheckAddrs(addrs("203.0.113.7", "127.0.0.1"), false)
	if !errors.Is(err, ErrEgressDenied) || !strings.Contains(err.Error(), "127.0.0.1 is loopback") {
		t.Fatalf("rebinding answer: %v", err)
	}
	_, err = CheckAddrs(addrs("203.0.113.7", "::ffff:169.254.169.254"), false)
	if !errors.Is(err, ErrEgressDenied) {
		t.Fatalf("mapped metadata address: %v", err)
	}
	a, err := CheckAddrs(addrs("203.0.113.7", "198.51.100.1"), false)
	if err != nil || a != netip.MustParseAddr("203.0.113.7") {
		t.Fatalf("public answer: %v %v", a, err)
	}
	a, err = CheckAddrs(addrs("::ffff:203.0.113.7"), false)
	if err != nil || a != netip.MustParseAddr("203.0.113.7") {
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
