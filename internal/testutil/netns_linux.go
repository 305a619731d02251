package testutil

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// netnsEnv names the test a child process runs in its own network
// namespace (InNetns).
const netnsEnv = "SLUICE_TEST_NETNS"

// InNetns runs the calling test again, alone, in a child process in a
// network namespace of its own (CLONE_NEWNET), so the test can number the
// host's interfaces as it likes — a public-looking address on loopback —
// and the host never sees it: the namespace ends with the child. In the
// parent InNetns waits for the child, logs its output, fails the test if
// the child's run did not pass, and returns false: the caller returns. In
// the child it brings loopback up and returns true: the caller is the
// test, in a namespace where loopback is the only interface, and may call
// AddAddr and AddLocalRoute. The whole process is in the namespace, so a
// daemon the test starts in-process dials from it too.
func InNetns(t *testing.T) bool {
	t.Helper()
	RequireRoot(t)
	if name := os.Getenv(netnsEnv); name != "" {
		if name != t.Name() {
			t.Skipf("the child of %s runs only that test", name)
		}
		ifs, err := net.Interfaces()
		if err != nil || len(ifs) != 1 || ifs[0].Name != "lo" {
			// Never renumber a namespace this helper did not make.
			t.Fatalf("%s=%s but this is not a fresh network namespace: %v %v", netnsEnv, name, ifs, err)
		}
		setUp(t, "lo")
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), netnsEnv+"="+t.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	t.Logf("in a network namespace of its own:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		t.Fatalf("%s in its network namespace: %v", t.Name(), err)
	}
	return false
}

func inChild(t testing.TB) {
	t.Helper()
	if os.Getenv(netnsEnv) == "" {
		t.Fatalf("only a test InNetns started may renumber its network namespace")
	}
}

// setUp sets IFF_UP on the interface.
func setUp(t testing.TB, name string) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	Must(t, err)
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	Must(t, err)
	Must(t, unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr))
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	Must(t, unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr))
}

// AddAddr adds p (an address and its prefix length) to loopback, as
// `ip addr add p dev lo` would (IPv6 without duplicate address detection,
// so it is usable at once). Only in InNetns's child.
func AddAddr(t testing.TB, p netip.Prefix) {
	t.Helper()
	inChild(t)
	lo, err := net.InterfaceByName("lo")
	Must(t, err)
	a := p.Addr()
	family, flags := byte(unix.AF_INET), byte(0)
	if a.Is6() {
		family, flags = unix.AF_INET6, unix.IFA_F_NODAD
	}
	msg := make([]byte, unix.SizeofIfAddrmsg)
	msg[0], msg[1], msg[2], msg[3] = family, byte(p.Bits()), flags, unix.RT_SCOPE_UNIVERSE
	binary.NativeEndian.PutUint32(msg[4:], uint32(lo.Index))
	msg = appendAttr(msg, unix.IFA_LOCAL, a.AsSlice())
	msg = appendAttr(msg, unix.IFA_ADDRESS, a.AsSlice())
	var sub int
	if a.Is6() {
		// IPv6 inserts the address's local route from a workqueue, after
		// the add is acknowledged: wait for the kernel's notice of it.
		sub, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		Must(t, err)
		defer unix.Close(sub)
		Must(t, unix.Bind(sub, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (unix.RTNLGRP_IPV6_ROUTE - 1)}))
		Must(t, unix.SetsockoptTimeval(sub, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 60}))
	}
	if err := netlinkDo(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, msg); err != nil {
		t.Fatalf("add %v to lo: %v", p, err)
	}
	if a.Is6() {
		if err := waitLocalRoute(sub, a); err != nil {
			t.Fatalf("add %v to lo: no local route: %v", p, err)
		}
	}
}

// waitLocalRoute reads route notifications from sub until one announces
// the local route of a.
func waitLocalRoute(sub int, a netip.Addr) error {
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(sub, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		for b := buf[:n]; len(b) >= unix.NLMSG_HDRLEN; {
			l := int(binary.NativeEndian.Uint32(b[0:]))
			if l < unix.NLMSG_HDRLEN || l > len(b) {
				break
			}
			m := b[unix.NLMSG_HDRLEN:l]
			if binary.NativeEndian.Uint16(b[4:]) == unix.RTM_NEWROUTE && len(m) >= unix.SizeofRtMsg && m[7] == unix.RTN_LOCAL {
				for attrs := m[unix.SizeofRtMsg:]; len(attrs) >= unix.SizeofRtAttr; {
					al := int(binary.NativeEndian.Uint16(attrs[0:]))
					if al < unix.SizeofRtAttr || al > len(attrs) {
						break
					}
					if binary.NativeEndian.Uint16(attrs[2:]) == unix.RTA_DST {
						if d, ok := netip.AddrFromSlice(attrs[unix.SizeofRtAttr:al]); ok && d == a {
							return nil
						}
					}
					attrs = attrs[min((al+3)&^3, len(attrs)):]
				}
			}
			b = b[min((l+3)&^3, len(b)):]
		}
	}
}

// AddLocalRoute makes the whole of p the host's without numbering any
// interface from it, as `ip route add local p dev lo` does (AnyIP: what
// a transparent proxy sets up). Only in InNetns's child.
func AddLocalRoute(t testing.TB, p netip.Prefix) {
	t.Helper()
	inChild(t)
	lo, err := net.InterfaceByName("lo")
	Must(t, err)
	family := byte(unix.AF_INET)
	if p.Addr().Is6() {
		family = unix.AF_INET6
	}
	msg := make([]byte, unix.SizeofRtMsg)
	msg[0], msg[1] = family, byte(p.Bits())
	msg[4], msg[5], msg[6], msg[7] = unix.RT_TABLE_LOCAL, unix.RTPROT_STATIC, unix.RT_SCOPE_HOST, unix.RTN_LOCAL
	msg = appendAttr(msg, unix.RTA_DST, p.Masked().Addr().AsSlice())
	oif := make([]byte, 4)
	binary.NativeEndian.PutUint32(oif, uint32(lo.Index))
	msg = appendAttr(msg, unix.RTA_OIF, oif)
	if err := netlinkDo(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL, msg); err != nil {
		t.Fatalf("add local route %v: %v", p, err)
	}
}

func appendAttr(b []byte, typ uint16, data []byte) []byte {
	n := unix.SizeofRtAttr + len(data)
	attr := make([]byte, (n+3)&^3)
	binary.NativeEndian.PutUint16(attr[0:], uint16(n))
	binary.NativeEndian.PutUint16(attr[2:], typ)
	copy(attr[unix.SizeofRtAttr:], data)
	return append(b, attr...)
}

// netlinkDo sends one rtnetlink request and waits for its acknowledgement.
func netlinkDo(typ, flags uint16, body []byte) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	req := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	binary.NativeEndian.PutUint32(req[0:], uint32(unix.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint16(req[4:], typ)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags)
	binary.NativeEndian.PutUint32(req[8:], 1)
	req = append(req, body...)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	if n < unix.NLMSG_HDRLEN+4 || binary.NativeEndian.Uint16(buf[4:]) != unix.NLMSG_ERROR {
		return fmt.Errorf("unexpected netlink answer (%d bytes)", n)
	}
	if errno := -int32(binary.NativeEndian.Uint32(buf[unix.NLMSG_HDRLEN:])); errno != 0 {
		return unix.Errno(errno)
	}
	return nil
}
