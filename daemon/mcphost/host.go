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
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/mcp"
)

// attachTimeout bounds the wait for the descriptors once the attach is
// answered.
const attachTimeout = 10 * time.Second

const (
	// MaxSessionsPerUID bounds one uid's attached sessions: each holds
	// a connection that is never idle.
	MaxSessionsPerUID = 32
	// maxPending bounds a session's requests read and not yet answered:
	// past it a request is answered at once with an error, so that a
	// client that sends and never reads holds no more than this many
	// calls, goroutines and results in sluiced.
	maxPending = 64
	// maxLine bounds one message of an attached session (a bounded
	// session reads a line whole before the SDK does): 4 MiB, where
	// `sluice mcp` in its own process takes the SDK's 16.
	maxLine = 4 << 20
	// maxClosing bounds the closes of client-passed descriptors still
	// running: a close can wait on what the client chose (a socket's
	// linger, a FUSE server's flush), so it runs apart from the
	// session, and past this many no session attaches.
	maxClosing = 16
)

// Host runs the attached sessions of one sluiced.
type Host struct {
	socket       string
	maxConns     int
	writeTimeout time.Duration
	log          *slog.Logger
	h            http.Handler // sluiced's
	mu           sync.Mutex
	uids         map[uint32]*uidSessions // under mu

	// stopping closes when sluiced stops: each session is handed back
	// to its `sluice mcp`.
	stopping chan struct{}
	closed   bool // under mu
	wg       sync.WaitGroup
	live     atomic.Int64
	seq      atomic.Uint64
	closing  map[uint32]int // under mu: closes of a uid's passed descriptors running
}

// uidSessions is one uid's sessions and the request slots they share: a
// uid's requests in process are capped as its connections are over the
// socket, however many sessions it attaches.
type uidSessions struct {
	n     int
	slots chan struct{}
}

// New returns a host whose sessions' requests h (sluiced's handler)
// serves, at most maxConns at once for one uid (a uid's connection cap
// over the socket); a write to a session's stdout that takes longer than
// writeTimeout ends the session; socket is named in their errors.
func New(h http.Handler, socket string, maxConns int, writeTimeout time.Duration, log *slog.Logger) *Host {
	return &Host{socket: socket, maxConns: max(maxConns, 1), writeTimeout: writeTimeout, log: log, h: h,
		uids: map[uint32]*uidSessions{}, closing: map[uint32]int{}, stopping: make(chan struct{})}
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
	// The attaching peer's credentials: its sessions are counted by
	// UID, and what sluiced writes on a socket handed over carries them
	// (SCM_CREDENTIALS), never sluiced's own.
	PID      int32
	UID, GID uint32
	// Bind puts the attaching peer in a request's context: every request
	// of the session is that peer's.
	Bind func(context.Context) context.Context
	// Log names the session's peer in the host's log lines.
	Log []any
	// PassRights says whether the attach connection takes descriptors.
	PassRights func(on bool)
}

// Attach is the rest of an accepted POST /v1/mcp, on nc (hijacked once
// the request was read whole, and nothing written on it yet), whose
// socket is uc: it answers 101, takes the two descriptors, and serves
// the session until it ends.
func (h *Host) Attach(nc net.Conn, uc *net.UnixConn, s Session) {
	defer nc.Close()
	u, status, why := h.begin(s.UID)
	if u == nil {
		writeHTTPError(nc, status, api.ErrUnavailable, why)
		return
	}
	defer h.end(s.UID)
	// The server's read deadline for the request is still set: a session
	// lasts as long as the client's.
	_ = nc.SetDeadline(time.Time{})
	if uc == nil {
		writeHTTPError(nc, 400, api.ErrBadRequest, "an MCP session attaches over the unix socket only")
		return
	}
	// This connection takes descriptors for the one message that
	// carries them (sluiced's connections take none otherwise).
	s.PassRights(true)
	if _, err := nc.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + api.MCPUpgrade + "\r\nConnection: Upgrade\r\n\r\n")); err != nil {
		return
	}
	closeLater := h.closeLater(s.UID)
	in, out, err := receive(uc, cred{PID: s.PID, UID: s.UID, GID: s.GID}, closeLater)
	s.PassRights(false)
	// More than the one message (descriptors queued while this
	// connection took them): taken now, closed apart, and refused.
	if Drain(uc, closeLater) && err == nil {
		closeLater(in, out)
		err = fmt.Errorf("more than one message after the upgrade")
	}
	if err != nil {
		writeLine(nc, api.MCPAttachState{Error: err.Error()})
		return
	}
	h.live.Add(1)
	defer h.live.Add(-1)
	writeLine(nc, api.MCPAttachState{Attached: true})
	end := h.serve(nc, uc, in, out, u.slots, closeLater, s)
	writeLine(nc, end)
}

// begin counts a session of uid in, unless the host is closing or uid
// has its most sessions (then the HTTP status and why).
func (h *Host) begin(uid uint32) (*uidSessions, int, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, http.StatusServiceUnavailable, "sluiced is stopping"
	}
	if h.closing[uid] >= maxClosing {
		return nil, http.StatusServiceUnavailable, fmt.Sprintf("sluiced is still closing descriptors uid %d's earlier attaches passed; retry later", uid)
	}
	u := h.uids[uid]
	if u == nil {
		u = &uidSessions{slots: make(chan struct{}, h.maxConns)}
		h.uids[uid] = u
	}
	if u.n >= MaxSessionsPerUID {
		return nil, http.StatusTooManyRequests, fmt.Sprintf("uid %d has %d MCP sessions attached, the most one uid may", uid, u.n)
	}
	u.n++
	h.wg.Add(1)
	return u, 0, ""
}

// end counts a session of uid out.
func (h *Host) end(uid uint32) {
	h.mu.Lock()
	if u := h.uids[uid]; u != nil {
		if u.n--; u.n == 0 {
			delete(h.uids, uid)
		}
	}
	h.mu.Unlock()
	h.wg.Done()
}

// serve runs the session until the client closes its stdin, `sluice mcp`
// goes away (its connection ends), or the host closes.
func (h *Host) serve(nc net.Conn, uc *net.UnixConn, in, out stream, slots chan struct{}, closeLater func(...io.Closer), s Session) api.MCPAttachState {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Once the session ends, whatever waits on its streams ends too: a
	// read of a client that sends nothing, a write to one that reads
	// nothing.
	w := &timedWriter{ctx: ctx, s: out, d: h.writeTimeout, fail: cancel}
	context.AfterFunc(ctx, func() {
		_ = in.SetReadDeadline(time.Unix(1, 0))
		w.end()
	})
	go func() {
		// `sluice mcp` sends nothing more: a read returns when it exits.
		// With room for descriptors, so that none is dropped (and closed)
		// in this thread; the connection takes none by now.
		b := make([]byte, 1)
		oob := make([]byte, 64)
		for {
			n, oobn, _, _, err := uc.ReadMsgUnix(b, oob)
			if oobn > 0 {
				closeLater(rightsIn(oob[:oobn])...)
			}
			if err != nil || n == 0 && oobn == 0 {
				break
			}
		}
		cancel()
	}()
	id := h.seq.Add(1)
	log := h.log.With(append([]any{"mcp_session", id}, s.Log...)...)
	c := client.NewInProcess(h.socket, h.handler(s.Bind, slots))
	defer c.Close()
	if s.Token != "" {
		if err := c.SetToken(s.Token); err != nil {
			closeLater(in, out)
			return api.MCPAttachState{End: api.MCPEndError, Error: err.Error()}
		}
	}
	log.Info("mcp session attached")
	b := mcp.New(mcp.Options{Socket: h.socket, Client: c, Logger: log, Task: s.Task})
	defer closeLater(in, out)
	hand, err := b.RunStdioSession(ctx, in, w, mcp.StdioOptions{Detach: h.stopping, MaxPending: maxPending, MaxLine: maxLine})
	detached := ctx.Err() != nil
	// What still waits on in or out ends now (the deferred closes run
	// apart: see closeLater).
	cancel()
	st := api.MCPAttachState{End: api.MCPEndEOF}
	switch {
	case hand != nil:
		st = api.MCPAttachState{End: api.MCPEndStopping, Handoff: &api.MCPHandoff{Rest: hand.Rest}}
		if hand.State != nil {
			st.Handoff.State, _ = json.Marshal(hand.State)
		}
	case w.failed() != nil:
		st = api.MCPAttachState{End: api.MCPEndError, Error: "writing to the client: " + w.failed().Error()}
	case detached:
		st = api.MCPAttachState{End: api.MCPEndDetached}
	case err != nil && !errors.Is(err, os.ErrClosed):
		st = api.MCPAttachState{End: api.MCPEndError, Error: err.Error()}
	}
	log.Info("mcp session ended", "end", st.End, "handed_back", st.Handoff != nil)
	return st
}

// handler serves the session's requests in process, each bound to the
// session's peer, holding one of its uid's slots (at most h.maxConns at
// once for the uid's sessions together, as the socket caps a uid's
// connections). A panic ends its request, not sluiced, as net/http's
// server would.
func (h *Host) handler(bind func(context.Context) context.Context, slots chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
		default:
			writeError(w, http.StatusServiceUnavailable, api.ErrUnavailable,
				"too many requests in flight in this uid's MCP sessions (the per-uid connection cap)")
			return
		}
		defer func() { <-slots }()
		defer func() {
			if p := recover(); p != nil && p != http.ErrAbortHandler {
				h.log.Error("panic serving an MCP session's request", "path", r.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				// A failure, not an empty 200 (if nothing was written yet).
				writeError(w, http.StatusInternalServerError, api.ErrInternal, "sluiced failed serving this request")
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
		status, http.StatusText(status), len(b)+1, b)
	_ = nc.SetWriteDeadline(time.Now().Add(attachTimeout))
	_ = w.Flush()
}

// timedWriter is a session's stdout: a write that the client does not
// take within d fails, and ends the session (fail), as sluiced's server
// ends a response it cannot write in --write-timeout.
type timedWriter struct {
	ctx  context.Context
	s    stream
	d    time.Duration
	fail func()

	mu    sync.Mutex
	err   error
	ended bool // the session ended: nothing more is written
}

// end stops every write, the one under way too (a past deadline), and
// any to come.
func (t *timedWriter) end() {
	t.mu.Lock()
	t.ended = true
	_ = t.s.SetWriteDeadline(time.Unix(1, 0))
	t.mu.Unlock()
}

func (t *timedWriter) Write(p []byte) (int, error) {
	// Once the session ended (or a write failed), nothing more is
	// written: a write must not set a fresh deadline over the past one
	// the end set, and wait on a client that reads nothing.
	t.mu.Lock()
	if t.ended || t.ctx.Err() != nil {
		t.mu.Unlock()
		return 0, os.ErrDeadlineExceeded
	}
	if err := t.err; err != nil {
		t.mu.Unlock()
		return 0, err
	}
	if t.d > 0 {
		// Under t.mu: end's past deadline is never replaced by this.
		_ = t.s.SetWriteDeadline(time.Now().Add(t.d))
	}
	t.mu.Unlock()
	n, err := t.s.Write(p)
	if err != nil && t.ctx.Err() == nil {
		// Not a write the session's end cut short: the client's fault.
		t.mu.Lock()
		if t.err == nil {
			t.err = err
		}
		t.mu.Unlock()
		t.fail()
	}
	return n, err
}

// failed is the write error that ended the session, if one did.
func (t *timedWriter) failed() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// closeLater returns what closes what uid's client passed apart from the
// session, counted per uid (maxClosing): a close can wait on what the
// client chose, a socket's linger or a FUSE server's flush, and must hold
// neither the session's end nor sluiced's stop, nor other uids' attaches.
func (h *Host) closeLater(uid uint32) func(...io.Closer) {
	return func(cs ...io.Closer) {
		if len(cs) == 0 {
			return
		}
		h.mu.Lock()
		h.closing[uid]++
		h.mu.Unlock()
		go func() {
			defer func() {
				h.mu.Lock()
				if h.closing[uid]--; h.closing[uid] <= 0 {
					delete(h.closing, uid)
				}
				h.mu.Unlock()
			}()
			for _, c := range cs {
				if c != nil {
					_ = c.Close()
				}
			}
		}()
	}
}
