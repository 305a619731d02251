package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// peerKey is the context key of a connection's peer credentials.
type peerKey struct{}

// Peer is what the kernel says about the process on the other end of the
// socket, read once when the connection is accepted.
type Peer struct {
	UID, GID uint32
	PID      int32
}

func peerFrom(ctx context.Context) (Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(Peer)
	return p, ok
}

// connContext stores SO_PEERCRED in the connection's context. A connection
// whose credentials cannot be read gets none, and every request on it is
// refused.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitConn); ok {
		c = lc.Conn
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid})
}

// listenUnix listens on path with mode 0660 (group "sluice" when that group
// exists), in a directory created 0750 if missing. A stale socket left by a
// crashed daemon is removed; a live one, or anything that is not a socket,
// is an error: we never take over another daemon's socket or delete a
// file we did not make.
func listenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create socket dir: %w", err)
		}
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("socket path %s exists and is not a socket; refusing to remove it", path)
		}
		c, derr := net.DialTimeout("unix", path, time.Second)
		if derr == nil {
			c.Close()
			return nil, fmt.Errorf("another daemon is listening on %s", path)
		}
		if !errors.Is(derr, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("socket path %s: %w", path, derr)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	// The socket is bound in a fresh 0700 directory, made 0660, then
	// renamed into place: it is never reachable with looser permissions,
	// and no process-wide umask is touched while other goroutines create
	// files.
	tmpDir, err := os.MkdirTemp(dir, ".sluice-listen-")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	defer os.RemoveAll(tmpDir)
	tmpSock := filepath.Join(tmpDir, "s")
	l, err := net.Listen("unix", tmpSock)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	if err := os.Chmod(tmpSock, 0o660); err != nil {
		l.Close()
		return nil, err
	}
	if err := os.Rename(tmpSock, path); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	l = &unlinkListener{UnixListener: ul, path: path}
	if g, err := user.LookupGroup("sluice"); err == nil {
		if gid, err := strconv.Atoi(g.Gid); err == nil {
			_ = os.Chown(path, 0, gid)
			_ = os.Chown(dir, 0, gid)
		}
	}
	return l, nil
}

// limitListener caps open connections so a flood of idle or slow clients
// cannot exhaust the daemon's fds; each slot is freed when its conn closes.
type limitListener struct {
	net.Listener
	sem chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// unlinkListener removes the socket file it was renamed to when closed.
type unlinkListener struct {
	*net.UnixListener
	path string
	once sync.Once
}

func (l *unlinkListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { os.Remove(l.path) })
	return err
}
