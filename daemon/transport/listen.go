//go:build linux

// Package transport is the daemon's side of the unix socket and of
// systemd: the listener and the peer credentials of each connection, the
// connection caps, socket activation and sd_notify, the follower hub of
// GET /v1/events, the locks on the daemon's dirs and socket, and the open
// file limit. It knows nothing of policies, calls or the ledger.
package transport

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
	// Cgroup is the peer process's cgroup v2 path ("/system.slice/a.service"),
	// read race-free through its pidfd when the connection was accepted
	// (peercgroup_linux.go); "" when it could not be: a kernel without
	// SO_PEERPIDFD, or a peer that exited first. Workload principals
	// (docs/manifest.md "units and cgroups") never match an unknown one.
	Cgroup string
}

// PeerFrom returns the peer credentials ConnContext put in ctx.
func PeerFrom(ctx context.Context) (Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(Peer)
	return p, ok
}

// ConnContext, the http.Server's hook, puts the peer credentials read when the connection was
// accepted in its context. A connection whose credentials could not be
// read gets none, and every request on it is refused.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	var p Peer
	var ok bool
	if tc, is := c.(*trackedConn); is {
		p, ok = tc.peer, tc.known
	} else {
		p, ok = peerCred(c)
	}
	if !ok {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, p)
}

// WithPeer returns ctx carrying p as its request's peer. Only sluiced's
// own in-process requests are made so: an attached MCP session's
// (daemon/mcphost), as the `sluice mcp` whose socket connection's
// credentials were read when it was accepted.
func WithPeer(ctx context.Context, p Peer) context.Context {
	return context.WithValue(ctx, peerKey{}, p)
}

// soPassRights is SO_PASSRIGHTS (Linux 6.16; golang.org/x/sys does not
// name it yet).
const soPassRights = 83

// SetPassRights says whether c (a unix socket) takes descriptors
// (SCM_RIGHTS). Accepted connections take none: descriptors a client
// sends beside an HTTP request are dropped by the read, which closes them
// in sluiced's reading thread, and a close can wait on what the client
// chose (a socket's linger, a FUSE server's flush). Only an MCP attach
// takes them, for the one message that carries them. An older kernel
// refuses the option; its connections keep taking descriptors.
func SetPassRights(c net.Conn, on bool) {
	if uc, ok := UnixConn(c); ok {
		setPassRights(uc, on)
	}
}

// setPassRights sets SO_PASSRIGHTS on s, a socket or a listening one
// (whose connections have it from their connect on).
func setPassRights(s interface {
	SyscallConn() (syscall.RawConn, error)
}, on bool) {
	raw, err := s.SyscallConn()
	if err != nil {
		return
	}
	v := 0
	if on {
		v = 1
	}
	_ = raw.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, soPassRights, v) })
}

// UnixConn returns the socket under an accepted connection, for the
// SCM_RIGHTS message of an MCP attach.
func UnixConn(c net.Conn) (*net.UnixConn, bool) {
	if tc, is := c.(*trackedConn); is {
		c = tc.Conn
	}
	uc, ok := c.(*net.UnixConn)
	return uc, ok
}

// peerCred reads SO_PEERCRED: what the kernel recorded of the peer when
// it connected, which the peer cannot choose.
func peerCred(c net.Conn) (Peer, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return Peer{}, false
	}
	p := Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}
	_ = raw.Control(func(fd uintptr) { p.Cgroup, _ = peerCgroup(int(fd)) })
	return p, true
}

// ListenUnix listens on path with mode 0660 (group "sluice" when that group
// exists), in a directory created 0750 if missing. A stale socket left by a
// crashed daemon is removed; a live one, or anything that is not a socket,
// is an error: we never take over another daemon's socket or delete a
// file we did not make.
func ListenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create socket dir: %w", err)
		}
	}
	// The stale check below dials, then removes: two daemons starting on
	// one stale socket could each find it dead, and the later one remove
	// the earlier one's live socket. The lock beside it, held for the
	// listener's life, makes the check and the takeover one daemon's.
	lock, err := lockFile("socket "+path, path+".lock", nil, "give this daemon its own --socket")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			UnlockAll([]*DirLock{lock})
		}
	}()
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
	// Before the socket is in place: no connection takes descriptors
	// from its connect on (Conns.Listener sets it again, for a socket
	// systemd made).
	setPassRights(ul, false)
	if err := os.Chmod(tmpSock, 0o660); err != nil {
		l.Close()
		return nil, err
	}
	if err := os.Rename(tmpSock, path); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	l = &unlinkListener{UnixListener: ul, path: path, lock: lock}
	ok = true
	if g, err := user.LookupGroup("sluice"); err == nil {
		if gid, err := strconv.Atoi(g.Gid); err == nil {
			_ = os.Chown(path, 0, gid)
			_ = os.Chown(dir, 0, gid)
		}
	}
	return l, nil
}

// unlinkListener removes the socket file it was renamed to when closed.
type unlinkListener struct {
	*net.UnixListener
	path string
	lock *DirLock // the socket's lock, released once the socket is gone
	once sync.Once
}

func (l *unlinkListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		os.Remove(l.path)
		UnlockAll([]*DirLock{l.lock})
	})
	return err
}

// admitListener admits connections under two caps, on all open
// connections and on those of one peer uid, and never blocks Accept. A
// listener that blocked at its cap let 1,100 idle connections from one
// local user hold every other client's /v1/health for 10 s. At a cap, the
// connection idle the longest is closed to make room (the same uid's for
// the per-uid cap, anyone's for the total cap): an idle HTTP/1.1
// connection holds nothing a client cannot get back by reconnecting, and
// the Go client and most others redial on their own. A connection with a
// request in flight is never closed; when every connection at the cap has
// one, the new connection is refused (closed at once).
type admitListener struct {
	net.Listener
	t *Conns
}

// Listener is ln admitting its connections under t's caps (see
// admitListener).
func (t *Conns) Listener(ln net.Listener) net.Listener {
	// Set on the listening socket, the option is the new connections'
	// from their connect on, before anything can be sent on them.
	if ul, ok := ln.(interface {
		SyscallConn() (syscall.RawConn, error)
	}); ok {
		setPassRights(ul, false)
	}
	return &admitListener{Listener: ln, t: t}
}

func (l *admitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, ok := peerCred(c)
		if tc := l.t.admit(c, p, ok); tc != nil {
			return tc, nil
		}
	}
}

// Conns counts open connections, in total and per peer uid, and keeps
// the idle ones in the order they became idle. http.Server.ConnState
// reports each connection's state: StateNew and StateIdle are idle (no
// request in flight), StateActive is busy.
type Conns struct {
	maxTotal, maxPerUID int
	log                 *slog.Logger

	mu               sync.Mutex
	total            int
	uids             map[int64]*uidConns
	idle             list.List // *trackedConn, idle longest first
	evicted, refused uint64
}

type uidConns struct {
	open int
	idle list.List // this uid's *trackedConn, idle longest first
}

// trackedConn is an admitted connection and its peer credentials, read
// once when it was accepted.
type trackedConn struct {
	net.Conn
	t     *Conns
	peer  Peer
	known bool  // the credentials could be read
	uid   int64 // peer.UID, or -1 when unknown: those share one count

	// under t.mu
	gone      bool
	idleSince time.Time
	idleAll   *list.Element // in t.idle while idle
	idleUID   *list.Element // in its uidConns.idle while idle
}

// NewConns caps open connections at maxTotal, and at maxPerUID for one
// peer uid (each at least 1).
func NewConns(maxTotal, maxPerUID int, log *slog.Logger) *Conns {
	return &Conns{maxTotal: max(maxTotal, 1), maxPerUID: max(maxPerUID, 1), log: log, uids: map[int64]*uidConns{}}
}

type eviction struct {
	c    *trackedConn
	cap  string
	idle time.Duration
}

// admit registers c, from peer p (known: its credentials could be read),
// as idle, closing what must go to make room for it. It returns nil,
// having closed c, when c cannot be admitted.
func (t *Conns) admit(c net.Conn, p Peer, known bool) *trackedConn {
	tc := &trackedConn{Conn: c, t: t, uid: -1}
	if known {
		tc.peer, tc.known, tc.uid = p, true, int64(p.UID)
	}
	now := time.Now()
	var ev *eviction
	t.mu.Lock()
	u := t.uids[tc.uid]
	if u == nil {
		u = &uidConns{}
		t.uids[tc.uid] = u
	}
	// An eviction for the per-uid cap also makes room in the total, so
	// the total cap needs checking only when the per-uid one is not hit.
	refused := ""
	if u.open >= t.maxPerUID {
		if e := u.idle.Front(); e != nil {
			ev = &eviction{c: e.Value.(*trackedConn), cap: "per_uid"}
		} else {
			refused = "per_uid"
		}
	} else if t.total >= t.maxTotal {
		if e := t.idle.Front(); e != nil {
			ev = &eviction{c: e.Value.(*trackedConn), cap: "total"}
		} else {
			refused = "total"
		}
	}
	if refused != "" {
		if u.open == 0 {
			delete(t.uids, tc.uid)
		}
		t.refused++
		t.mu.Unlock()
		c.Close()
		t.log.Debug("refused a connection: every connection at the cap has a request in flight",
			"cap", refused, "uid", tc.uid, "max_conns", t.maxTotal, "max_conns_per_uid", t.maxPerUID)
		return nil
	}
	if ev != nil {
		ev.idle = now.Sub(ev.c.idleSince)
		t.dropLocked(ev.c)
		t.evicted++
	}
	u.open++
	t.total++
	t.setIdleLocked(tc, u, true, now)
	t.mu.Unlock()
	if ev != nil {
		ev.c.Conn.Close()
		t.log.Debug("closed an idle connection to admit a new one", "cap", ev.cap,
			"uid", ev.c.uid, "idle_for", ev.idle.String(), "new_uid", tc.uid)
	}
	return tc
}

// setIdleLocked moves c into or out of the idle lists; a connection that
// turns idle again goes to the back.
func (t *Conns) setIdleLocked(c *trackedConn, u *uidConns, idle bool, now time.Time) {
	switch {
	case idle && c.idleAll == nil:
		c.idleSince = now
		c.idleAll = t.idle.PushBack(c)
		c.idleUID = u.idle.PushBack(c)
	case !idle && c.idleAll != nil:
		t.idle.Remove(c.idleAll)
		u.idle.Remove(c.idleUID)
		c.idleAll, c.idleUID = nil, nil
	}
}

// dropLocked stops counting c; it is closing or about to be.
func (t *Conns) dropLocked(c *trackedConn) {
	if c.gone {
		return
	}
	c.gone = true
	u := t.uids[c.uid]
	t.setIdleLocked(c, u, false, time.Time{})
	u.open--
	t.total--
	if u.open == 0 {
		delete(t.uids, c.uid)
	}
}

// ConnState is the http.Server's ConnState hook.
func (t *Conns) ConnState(c net.Conn, s http.ConnState) {
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if tc.gone {
		return
	}
	switch s {
	case http.StateNew, http.StateIdle:
		t.setIdleLocked(tc, t.uids[tc.uid], true, time.Now())
	case http.StateActive, http.StateHijacked:
		t.setIdleLocked(tc, t.uids[tc.uid], false, time.Time{})
	case http.StateClosed:
		t.dropLocked(tc)
	}
}

// Stats reports open connections and how many were evicted or refused.
func (t *Conns) Stats() (open int, evicted, refused uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total, t.evicted, t.refused
}

// Close closes the connection and frees its place in the counts.
func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.t.mu.Lock()
	c.t.dropLocked(c)
	c.t.mu.Unlock()
	return err
}
