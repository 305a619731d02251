//go:build linux

package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// HostOwns reports whether a connection to a would be delivered to this
// host itself rather than sent out of it. It asks the kernel's routing
// the question `ip route get` asks (RTM_GETROUTE over rtnetlink, in
// sluiced's network namespace, where it dials) and answers by the type of
// the route the kernel would use: local — an address of any of the host's
// interfaces, whatever its range (the third review reached a service bound
// to 0.0.0.0 through the VM's own eth0 address; docs/security.md "The
// third review"), a loopback address, or a local route that owns a whole
// range (`ip route add local 198.51.100.0/24 dev lo`, which no list of
// interface addresses shows) — or broadcast, anycast, multicast.
//
// The kernel answers from its tables as they are at the call, so an
// address added a moment ago is already the host's: there is no copy to
// keep current and no notification to miss (an rtnetlink subscription
// would have to resynchronise after every ENOBUFS, and still answer from
// a copy that trails the kernel). One lookup costs a netlink round trip,
// a few microseconds against a TCP connect's round trip
// (BenchmarkHostOwns).
//
// A destination the kernel has no usable route to (unreachable,
// prohibit, blackhole) is returned as an error, as is any failure to ask:
// the caller dials nothing (fail closed).
func HostOwns(a netip.Addr) (bool, error) {
	a = a.Unmap()
	if !a.IsValid() || a.Zone() != "" {
		return false, fmt.Errorf("route lookup: %v is not a plain address", a)
	}
	family, dst := byte(unix.AF_INET), a.AsSlice()
	if a.Is6() {
		family = unix.AF_INET6
	}
	typ, err := routeType(family, dst)
	if err != nil {
		return false, fmt.Errorf("route to %v: %w", a, err)
	}
	switch typ {
	case unix.RTN_UNICAST:
		return false, nil
	case unix.RTN_UNREACHABLE, unix.RTN_PROHIBIT, unix.RTN_BLACKHOLE, unix.RTN_THROW:
		return false, fmt.Errorf("route to %v: %w", a, unix.EHOSTUNREACH)
	}
	// RTN_LOCAL, RTN_BROADCAST, RTN_ANYCAST, RTN_MULTICAST, and any type
	// this code does not know: the host's (refused).
	return true, nil
}

var routeSeq atomic.Uint32

// routeType sends one RTM_GETROUTE for dst and returns the rtm_type of
// the kernel's answer. A fresh socket per lookup: nothing is shared
// between concurrent dials, and rtnetlink queues its answer before
// sendto returns, so the receive does not wait.
func routeType(family byte, dst []byte) (byte, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return 0, os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	// A bound on the receive, should the answer ever not be queued yet.
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5}); err != nil {
		return 0, os.NewSyscallError("setsockopt", err)
	}
	seq := routeSeq.Add(1)
	ne := binary.NativeEndian
	// nlmsghdr (16) | rtmsg (12) | rtattr RTA_DST (4 + 4 or 16): each
	// part a multiple of 4, so no padding.
	req := make([]byte, unix.NLMSG_HDRLEN+unix.SizeofRtMsg+unix.SizeofRtAttr+len(dst))
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.RTM_GETROUTE)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], seq)
	rtm := req[unix.NLMSG_HDRLEN:]
	rtm[0] = family                // rtm_family
	rtm[1] = byte(len(dst) * 8)    // rtm_dst_len: this one address
	attr := rtm[unix.SizeofRtMsg:] // rtm_table, _type, ... zero: the kernel's lookup
	ne.PutUint16(attr[0:], uint16(unix.SizeofRtAttr+len(dst)))
	ne.PutUint16(attr[2:], unix.RTA_DST)
	copy(attr[unix.SizeofRtAttr:], dst)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, os.NewSyscallError("sendto", err)
	}
	buf := make([]byte, 4096)
	for {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, os.NewSyscallError("recvfrom", err)
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
			continue // only the kernel answers
		}
		msg := buf[:n]
		if len(msg) < unix.NLMSG_HDRLEN || ne.Uint32(msg[8:]) != seq {
			continue
		}
		switch ne.Uint16(msg[4:]) {
		case unix.NLMSG_ERROR:
			if len(msg) < unix.NLMSG_HDRLEN+4 {
				return 0, errors.New("short netlink error")
			}
			errno := -int32(ne.Uint32(msg[unix.NLMSG_HDRLEN:]))
			if errno == 0 {
				return 0, errors.New("route lookup acknowledged without an answer")
			}
			return 0, unix.Errno(errno)
		case unix.RTM_NEWROUTE:
			if len(msg) < unix.NLMSG_HDRLEN+unix.SizeofRtMsg {
				return 0, errors.New("short route answer")
			}
			return msg[unix.NLMSG_HDRLEN+7], nil // rtm_type
		default:
			return 0, fmt.Errorf("unexpected netlink message type %d", ne.Uint16(msg[4:]))
		}
	}
}
