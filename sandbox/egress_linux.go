package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// EgressPort is where a container with egress finds sluiced's proxy:
// 127.0.0.1:EgressPort on its own loopback (docs/sandbox.md, "Egress for
// commands"). Every container has its own network namespace, so one
// fixed port serves them all.
const EgressPort = 3128

// EgressProxyURL is the value of the proxy variables in a container with
// egress.
var EgressProxyURL = fmt.Sprintf("http://127.0.0.1:%d", EgressPort)

// EgressListener is the proxy's listening socket in the box's network
// namespace, or nil for a box without egress. The caller serves it while
// the box's command runs (and closes it); Destroy closes it too.
func (b *Box) EgressListener() net.Listener { return b.egress }

// listenEgress brings the loopback of the box's network namespace up and
// makes a TCP listener on 127.0.0.1:EgressPort in it, from sluiced: no
// process inside the container serves it, and the socket keeps the
// namespace it was made in, so connections from the container arrive at
// sluiced on that fd. The namespace is reached through an fd of the
// container's init (a child of sluiced's, not yet reaped, so its pid
// cannot name another process), never by a path a workspace controls.
func (b *Box) listenEgress() error {
	pid, err := b.proc.Pid()
	if err != nil {
		return fmt.Errorf("egress: container init: %w", err)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return fmt.Errorf("egress: open the container's network namespace: %w", err)
	}
	defer ns.Close()
	l, err := listenInNetns(ns)
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	b.egress = l
	return nil
}

// listenInNetns runs on a thread of its own that joins ns and is then
// discarded: the goroutine never unlocks it, so the Go runtime ends the
// thread with the goroutine and no other goroutine ever runs in that
// namespace (and the runtime makes new threads from a clean template
// thread, never from this one).
func listenInNetns(ns *os.File) (net.Listener, error) {
	if err := sameNetns(ns); err != nil {
		return nil, err
	}
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: see above.
		l, err := listenHere(ns)
		ch <- result{l, err}
	}()
	r := <-ch
	return r.l, r.err
}

// sameNetns refuses ns when it is sluiced's own network namespace: a
// listener there would be the host's.
func sameNetns(ns *os.File) error {
	var there, here unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &there); err != nil {
		return err
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &here); err != nil {
		return err
	}
	if there.Dev == here.Dev && there.Ino == here.Ino {
		return errors.New("the container shares sluiced's network namespace")
	}
	return nil
}

// listenHere runs on the locked thread.
func listenHere(ns *os.File) (net.Listener, error) {
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("join the container's network namespace: %w", err)
	}
	if err := onlyLoopback(); err != nil {
		return nil, err
	}
	if err := loopbackUp(); err != nil {
		return nil, fmt.Errorf("bring lo up: %w", err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "egress-proxy")
	defer f.Close() // FileListener holds a dup
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: EgressPort, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return nil, fmt.Errorf("bind 127.0.0.1:%d: %w", EgressPort, err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		return nil, err
	}
	return net.FileListener(f)
}

// onlyLoopback checks that the namespace has no interface but lo: a
// fresh namespace has none, and bringing lo up must not make anything
// else reachable.
func onlyLoopback() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, i := range ifs {
		if i.Name != "lo" {
			return fmt.Errorf("the container's network namespace has interface %q; only lo is expected", i.Name)
		}
	}
	return nil
}

// loopbackUp sets IFF_UP on lo (the kernel then gives it 127.0.0.1/8
// and ::1): no route leaves it.
func loopbackUp() error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr)
}
