//go:build linux

package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	sdnotify "github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// DefaultWarmTimeout bounds how long start waits for the warm pools' first
// containers before it tells systemd READY=1 anyway (and serves cold).
const DefaultWarmTimeout = 20 * time.Second

// activatedListener returns the socket systemd passed (socket activation,
// LISTEN_FDS), or nil when none was: sluiced then binds --socket itself.
// The LISTEN_* variables are unset, and the fd is close-on-exec, so no
// container init inherits either.
func activatedListener() (net.Listener, error) {
	files := activation.Files(true)
	if len(files) == 0 {
		return nil, nil
	}
	return listenerFrom(files)
}

// listenerFrom checks that systemd passed exactly one listening unix
// stream socket and makes it a listener; the files are closed. Anything
// else is a misconfigured unit (a datagram or TCP socket, Accept=yes,
// several ListenStream= lines), refused with a message that names the fix.
func listenerFrom(files []*os.File) (net.Listener, error) {
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if len(files) != 1 {
		return nil, fmt.Errorf("socket activation: systemd passed %d sockets; sluiced.socket must have exactly one ListenStream= (a unix socket path)", len(files))
	}
	f := files[0]
	fd := int(f.Fd())
	domain, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return nil, fmt.Errorf("socket activation: fd %d is not a socket: %w", fd, err)
	}
	typ, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	listening, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	switch {
	case domain != unix.AF_UNIX || typ != unix.SOCK_STREAM:
		return nil, fmt.Errorf("socket activation: the passed socket is not a unix stream socket (domain %d, type %d); use ListenStream=/run/sluice/sluice.sock", domain, typ)
	case listening != 1:
		return nil, errors.New("socket activation: the passed socket is not listening; sluiced.socket must not set Accept=yes")
	}
	l, err := net.FileListener(f) // a dup, close-on-exec
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	ul, ok := l.(*net.UnixListener)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("socket activation: got a %T", l)
	}
	// systemd owns the socket file: closing ours must not remove it, so
	// connections made while sluiced restarts wait in its backlog.
	ul.SetUnlinkOnClose(false)
	return ul, nil
}

// listen is the activated socket when systemd passed one, else a socket
// bound at cfg.Socket (see listenUnix). activated says which.
func (d *Daemon) listen() (ln net.Listener, activated bool, err error) {
	ln, err = activatedListener()
	if err != nil || ln != nil {
		if ln != nil && ln.Addr().String() != d.cfg.Socket {
			d.log.Info("serving the socket systemd passed, not --socket", "socket", ln.Addr().String(), "flag", d.cfg.Socket)
		}
		return ln, ln != nil, err
	}
	ln, err = listenUnix(d.cfg.Socket)
	return ln, false, err
}

// notify sends state to systemd (sd_notify); outside systemd
// (NOTIFY_SOCKET unset) it does nothing.
func (d *Daemon) notify(state ...string) {
	if _, err := sdnotify.SdNotify(false, strings.Join(state, "\n")); err != nil {
		d.log.Warn("sd_notify", "err", err)
	}
}

// underSystemd reports whether systemd listens for notifications.
func underSystemd() bool { return os.Getenv("NOTIFY_SOCKET") != "" }

// status is the one-line STATUS= systemd shows in `systemctl status`.
func (d *Daemon) status() string {
	d.mu.RLock()
	p := d.pol
	d.mu.RUnlock()
	running, queued := d.slots.Stats()
	warm, pools := p.poolsWarm()
	v := strings.TrimPrefix(p.m.Version, "sha256:")
	if len(v) > 12 {
		v = v[:12]
	}
	return fmt.Sprintf("STATUS=policy %s, %d tools, %d calls in flight, %d containers running, %d queued, pools %d/%d warm",
		v, len(p.m.Tools), d.calls.inFlight(), running, queued, warm, pools)
}

// waitWarm waits, at most timeout, until every pool of the current policy
// has its first container ready, so that READY=1 means the first execute
// calls do not start cold. It returns how many of how many pools are warm.
// A reload while it waits closes the pools it waits for: it then returns.
func (d *Daemon) waitWarm(ctx context.Context, timeout time.Duration) (warm, pools int) {
	d.mu.RLock()
	p := d.pol
	d.mu.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, et := range p.exec {
		if et.pool != nil {
			pools++
			if et.pool.WaitWarm(ctx) {
				warm++
			}
		}
	}
	return warm, pools
}

// poolsWarm counts the policy's pools with a container waiting now.
func (p *policy) poolsWarm() (warm, pools int) {
	for _, et := range p.exec {
		if et.pool != nil {
			pools++
			if et.pool.Ready() > 0 || et.pool.Min() == 0 { // min 0: fills only under load
				warm++
			}
		}
	}
	return warm, pools
}
