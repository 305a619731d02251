//go:build !linux

package egress

import (
	"fmt"
	"net"
	"net/netip"
)

// HostOwns reports whether a is an address of one of this host's
// interfaces. sluiced runs on Linux, where the kernel's routing answers
// (hostowns_linux.go); elsewhere the interface list is the best answer at
// hand, and a failure to read it is returned (the caller dials nothing).
func HostOwns(a netip.Addr) (bool, error) {
	a = a.Unmap()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false, fmt.Errorf("interface addresses: %w", err)
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if b, ok := netip.AddrFromSlice(n.IP); ok && b.Unmap() == a {
				return true, nil
			}
		}
	}
	return false, nil
}
