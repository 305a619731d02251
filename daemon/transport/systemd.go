//go:build linux

package transport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/coreos/go-systemd/v22/activation"
	sdnotify "github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// ActivatedListener returns the socket systemd passed (socket activation,
// LISTEN_FDS), or nil when none was: sluiced then binds --socket itself.
// The LISTEN_* variables are unset, and the fd is close-on-exec, so no
// container init inherits either.
func ActivatedListener() (net.Listener, error) {
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

// The states Notify sends at start, stop and reload.
const (
	NotifyReady     = sdnotify.SdNotifyReady
	NotifyStopping  = sdnotify.SdNotifyStopping
	NotifyReloading = sdnotify.SdNotifyReloading
)

// Notify sends state to systemd (sd_notify), one line each; outside
// systemd (NOTIFY_SOCKET unset) it does nothing.
func Notify(state ...string) error {
	_, err := sdnotify.SdNotify(false, strings.Join(state, "\n"))
	return err
}

// MonotonicUsec is the MONOTONIC_USEC= line systemd wants beside
// RELOADING=1.
func MonotonicUsec() string {
	return strings.TrimSuffix(sdnotify.SdNotifyMonotonicUsec(), "\n")
}

// UnderSystemd reports whether systemd listens for notifications.
func UnderSystemd() bool { return os.Getenv("NOTIFY_SOCKET") != "" }
