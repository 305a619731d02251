//go:build linux

// Package mcphost serves `sluice mcp` sessions inside sluiced.
//
// `sluice mcp` attaches (POST /v1/mcp, docs/clients.md "Attached sessions"):
// it hands sluiced its stdin and stdout over the socket (SCM_RIGHTS) and
// waits. sluiced then serves the MCP session on those two descriptors
// with the same bridge `sluice mcp` would run in its own process (package
// mcp), and the bridge's requests reach sluiced's handlers over
// in-process requests bound to the attaching peer:
// the same uid, cgroup, token, task and checks as over the socket. What
// it saves is a second process on the path of every call: the client's
// message reaches the process that decides and audits it.
//
// The descriptors are used only as the protocol's stream: they must be
// pipes or sockets (pollable, so that ending a session never waits on a
// read), and sluiced only reads JSON-RPC from one and writes it to the
// other, as `sluice mcp` would have, with rights the peer already had.
package mcphost

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/mcp"
)

// attachTimeout bounds the wait for the descriptors once the attach is
// answered.
const attachTimeout = 10 * time.Second

// Host runs the attached sessions of one sluiced.
type Host struct {
	socket   string
	maxConns int
	log      *slog.Logger
	h        http.Handler // sluiced's
	mu       sync.Mutex

	// stopping closes when sluiced stops: each session is handed back
	// to its `sluice mcp`.
	stopping chan struct{}
	closed   bool // under mu
	wg       sync.WaitGroup
	live     atomic.Int64
	seq      atomic.Uint64
}

// New returns a host whose sessions' requests h (sluiced's handler)
// serves, at most maxConns at once each (a uid's connection cap over the
// socket); socket is named in their errors.
func New(h http.Handler, socket string, maxConns int, log *slog.Logger) *Host {
	return &Host{socket: socket, maxConns: max(maxConns, 1), log: log, h: h, stopping: make(chan struct{})}
}

// Sessions is the number of attached sessions.
func (h *Host) Sessions() int { return int(h.live.Load()) }

// Close hands every session back to its `sluice mcp`, which serves it on
// in its own process: each stops reading at a message's end, answers
// what it read (its calls end as sluiced's calls do when it stops), and
// sends its state and what it read of the next message. It waits for
// them; no session attaches after it.
func (h *Host) Close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.stopping)
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// Session is what an attach request says of its session.
type Session struct {
	Task, Token string
	// UID is the attaching peer's: a socket handed over must be a unix
	// socket whose other end is that uid's.
	UID uint32
	// Bind puts the attaching peer in a request's context: every request
	// of the session is that peer's.
	Bind func(context.Context) context.Context
	// Log names the session's peer in the host's log lines.
	Log []any
}

// Attach is the rest of an accepted POST /v1/mcp, on nc (hijacked once
// the request was read whole, and nothing written on it yet), whose
// socket is uc: it answers 101, takes the two descriptors, and serves
// the session until it ends.
func (h *Host) Attach(nc net.Conn, uc *net.UnixConn, s Session) {
	defer nc.Close()
	if !h.begin() {
		writeHTTPError(nc, 503, api.ErrUnavailable, "sluiced is stopping")
		return
	}
	defer h.wg.Done()
	// The server's read deadline for the request is still set: a session
	// lasts as long as the client's.
	_ = nc.SetDeadline(time.Time{})
	if uc == nil {
		writeHTTPError(nc, 400, api.ErrBadRequest, "an MCP session attaches over the unix socket only")
		return
	}
	if _, err := nc.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + api.MCPUpgrade + "\r\nConnection: Upgrade\r\n\r\n")); err != nil {
		return
	}
	in, out, err := receive(uc, s.UID)
	if err != nil {
		writeLine(nc, api.MCPAttachState{Error: err.Error()})
		return
	}
	h.live.Add(1)
	defer h.live.Add(-1)
	writeLine(nc, api.MCPAttachState{Attached: true})
	end := h.serve(nc, in, out, s)
	writeLine(nc, end)
}

// begin counts a session in unless the host is closing.
func (h *Host) begin() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.wg.Add(1)
	return true
}

// serve runs the session until the client closes its stdin, `sluice mcp`
// goes away (its connection ends), or the host closes.
func (h *Host) serve(nc net.Conn, in, out *os.File, s Session) api.MCPAttachState {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// `sluice mcp` sends nothing more: a read returns when it exits.
		var b [1]byte
		_, _ = nc.Read(b[:])
		cancel()
	}()
	id := h.seq.Add(1)
	log := h.log.With(append([]any{"mcp_session", id}, s.Log...)...)
	c := client.NewInProcess(h.socket, h.handler(s.Bind))
	defer c.Close()
	if s.Token != "" {
		if err := c.SetToken(s.Token); err != nil {
			in.Close()
			out.Close()
			return api.MCPAttachState{End: api.MCPEndError, Error: err.Error()}
		}
	}
	log.Info("mcp session attached")
	b := mcp.New(mcp.Options{Socket: h.socket, Client: c, Logger: log, Task: s.Task})
	hand, err := b.RunStdioSession(ctx, in, out, mcp.StdioOptions{Detach: h.stopping})
	// The fast path's reader may still wait on in: closing it ends the read.
	in.Close()
	out.Close()
	st := api.MCPAttachState{End: api.MCPEndEOF}
	switch {
	case hand != nil:
		st = api.MCPAttachState{End: api.MCPEndStopping, Handoff: &api.MCPHandoff{Rest: hand.Rest}}
		if hand.State != nil {
			st.Handoff.State, _ = json.Marshal(hand.State)
		}
	case ctx.Err() != nil:
		st = api.MCPAttachState{End: api.MCPEndDetached}
	case err != nil && !errors.Is(err, os.ErrClosed):
		st = api.MCPAttachState{End: api.MCPEndError, Error: err.Error()}
	}
	log.Info("mcp session ended", "end", st.End, "handed_back", st.Handoff != nil)
	return st
}

// handler serves the session's requests in process, each bound to the
// session's peer, at most h.maxConns at once, as the socket caps a uid's
// connections. A panic ends its request, not sluiced, as net/http's
// server would.
func (h *Host) handler(bind func(context.Context) context.Context) http.Handler {
	slots := make(chan struct{}, h.maxConns)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
		default:
			writeError(w, http.StatusServiceUnavailable, api.ErrUnavailable,
				"too many requests in flight in this MCP session (the per-uid connection cap)")
			return
		}
		defer func() { <-slots }()
		defer func() {
			if p := recover(); p != nil && p != http.ErrAbortHandler {
				h.log.Error("panic serving an MCP session's request", "path", r.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			}
		}()
		h.h.ServeHTTP(w, r.WithContext(bind(r.Context())))
	})
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// receive reads the one message that carries stdin and stdout.
func receive(uc *net.UnixConn, uid uint32) (in, out *os.File, err error) {
	_ = uc.SetReadDeadline(time.Now().Add(attachTimeout))
	defer uc.SetReadDeadline(time.Time{})
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(3*4))
	_, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the descriptors: %w", err)
	}
	var fds []int
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if r, rerr := unix.ParseUnixRights(&m); rerr == nil {
				fds = append(fds, r...)
			}
		}
	}
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if flags&unix.MSG_CTRUNC != 0 || len(fds) != 2 {
		closeAll()
		return nil, nil, fmt.Errorf("want 2 descriptors (stdin, stdout) in one message, got %d", len(fds))
	}
	for i, fd := range fds {
		if err := usable(fd, i == 0, uid); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	return os.NewFile(uintptr(fds[0]), "mcp-stdin"), os.NewFile(uintptr(fds[1]), "mcp-stdout"), nil
}

// usable checks that fd is a pipe, or a unix stream socket whose other
// end is uid's, open for reading (stdin) or writing (stdout), and makes it
// non-blocking so that os.NewFile puts it in the runtime's poller: a read
// or write never holds a thread, and closing the file ends one that
// waits. A socket to anyone else is refused: what sluiced writes on a
// unix socket carries its own credentials to a receiver that asks for
// them (SO_PASSCRED), and sluiced speaks for nobody but the peer.
func usable(fd int, read bool, uid uint32) error {
	name := "stdout"
	if read {
		name = "stdin"
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
	case unix.S_IFSOCK:
		if dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || dom != unix.AF_UNIX {
			return fmt.Errorf("%s is a socket, but not a unix socket", name)
		}
		// A stream: a datagram socket connect()ed to a receiver has no
		// peer credentials, and the kernel then reports the overflow uid
		// (65534), which an agent running as nobody would match.
		if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_STREAM {
			return fmt.Errorf("%s is a unix socket, but not a stream socket", name)
		}
		cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil || cred.Pid == 0 || cred.Uid != uid {
			return fmt.Errorf("%s is a unix socket whose other end is not this user's", name)
		}
	default:
		return fmt.Errorf("%s is not a pipe or a socket", name)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	switch acc := fl & unix.O_ACCMODE; {
	case read && acc == unix.O_WRONLY, !read && acc == unix.O_RDONLY:
		return fmt.Errorf("%s is not open for %s", name, map[bool]string{true: "reading", false: "writing"}[read])
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func writeLine(nc net.Conn, v any) {
	b, _ := json.Marshal(v)
	_ = nc.SetWriteDeadline(time.Now().Add(attachTimeout))
	_, _ = nc.Write(append(b, '\n'))
}

// writeHTTPError answers the attach with an error, before any upgrade.
func writeHTTPError(nc net.Conn, status int, code, msg string) {
	b, _ := json.Marshal(api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}})
	w := bufio.NewWriter(nc)
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		status, statusText(status), len(b)+1, b)
	_ = nc.SetWriteDeadline(time.Now().Add(attachTimeout))
	_ = w.Flush()
}

func statusText(status int) string {
	switch status {
	case 400:
		return "Bad Request"
	case 503:
		return "Service Unavailable"
	}
	return "Error"
}
