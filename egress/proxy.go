package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/egress/netpolicy"
	"github.com/sluicehq/sluice/internal/errclass"
	"github.com/sluicehq/sluice/internal/redact"
)

// ConnRecord describes one proxied connection when it ends: what was
// asked, what was dialed, how much moved each way and why it ended.
type ConnRecord struct {
	Method   string // "CONNECT", or the plain-HTTP method
	Target   string // the requested authority or URL, as redact.URL keeps it (query values by digest, bounded)
	Host     string // normalized host, when it parsed
	Port     uint16
	Addr     netip.AddrPort // address dialed; zero if none
	Rule     netpolicy.Rule
	BytesOut int64 // client → upstream (request bodies, tunnelled bytes)
	BytesIn  int64 // upstream → client
	Start    time.Time
	Duration time.Duration
	Verdict  string     // "allow" or "deny"
	Reason   api.Reason // allowed, egress_denied, upstream_error, invalid_args, limit_exceeded
	Detail   string     // why, for logs; never shown to the command as prose beyond the status line; never the request's own bytes
}

// Proxy is a forward proxy for a command's egress: HTTP CONNECT tunnels
// and plain-HTTP absolute-URI requests, one request per connection, each
// authorized by Policy (hosts, schemes, ports), its name resolved once and
// checked, and dialed at exactly the checked address. Everything else is
// answered 403 (refused), 400 (malformed) or 405 (method).
//
// A slow or silent client (slowloris) holds only its own goroutine: the
// request header must arrive within HeaderTimeout and fit MaxHeaderBytes,
// and at most MaxConns connections are served at once.
type Proxy struct {
	Client *Client // nil: the default client
	Policy *netpolicy.Policy
	// OnConn is called once per connection when it ends (allowed or not).
	OnConn func(ConnRecord)
	// HeaderTimeout bounds reading the request header; 0 means 10s.
	HeaderTimeout time.Duration
	// IdleTimeout ends a tunnel with no traffic either way; 0 means 5m.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request header; 0 means 32 KiB.
	MaxHeaderBytes int
	// MaxConns bounds concurrent connections; 0 means 256.
	MaxConns int
	// Admit, when set, is asked for each accepted connection before
	// anything is read from it; false answers 503 and closes it, and
	// OnConn is not called for it (the caller counts what it refused).
	// It is called from the accepting goroutine only.
	Admit func() bool
}

// Serve accepts connections on l until ctx ends or l fails, then closes l
// and every open connection and waits for their records.
func (px *Proxy) Serve(ctx context.Context, l net.Listener) error {
	maxConns := px.MaxConns
	if maxConns == 0 {
		maxConns = 256
	}
	sem := make(chan struct{}, maxConns)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var err error
	for {
		var c net.Conn
		c, err = l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				err = nil
				break
			}
			// Out of fds: wait for connections to end rather than give
			// up serving (net/http does the same).
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				select {
				case <-time.After(50 * time.Millisecond):
					continue
				case <-ctx.Done():
					err = nil
				}
			}
			break
		}
		if px.Admit != nil && !px.Admit() {
			busy(c)
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			busy(c)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			px.serveConn(ctx, c)
		}()
	}
	l.Close()
	cancel()
	wg.Wait()
	return err
}

// maxRecordTarget bounds ConnRecord.Target's scheme, authority and path.
const maxRecordTarget = 512

// errorClass is what a record says of a request that did not parse: the
// error's words before any quoted or appended input ("malformed HTTP
// request", "malformed MIME header line"), at most 64 bytes.
func errorClass(err error) string {
	s := err.Error()
	if i := strings.IndexAny(s, "\"\n"); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, ": "); i >= 0 && strings.HasPrefix(s, "malformed") {
		s = s[:i]
	}
	s = strings.TrimSpace(s)
	if len(s) > 64 {
		s = s[:64]
	}
	if s == "" {
		return "malformed"
	}
	return s
}

// busy answers 503 on a connection that is not served, and closes it.
func busy(c net.Conn) {
	c.SetWriteDeadline(time.Now().Add(time.Second))
	io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
	c.Close()
}

// headerLimit lets the header phase read at most n bytes, then, once
// lifted, passes everything through (the tunnel or the request body).
type headerLimit struct {
	r io.Reader
	n atomic.Int64 // < 0: no limit
}

func (h *headerLimit) Read(p []byte) (int, error) {
	n := h.n.Load()
	if n == 0 {
		return 0, errHeaderTooLarge
	}
	if n > 0 && int64(len(p)) > n {
		p = p[:n]
	}
	k, err := h.r.Read(p)
	if n > 0 {
		h.n.Add(-int64(k))
	}
	return k, err
}

var errHeaderTooLarge = errors.New("request header too large")

func (px *Proxy) serveConn(ctx context.Context, c net.Conn) {
	rec := ConnRecord{Start: time.Now(), Verdict: "deny", Reason: api.ReasonInvalidArgs}
	defer func() {
		rec.Duration = time.Since(rec.Start)
		if px.OnConn != nil {
			px.OnConn(rec)
		}
	}()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	defer c.Close()

	ht := px.HeaderTimeout
	if ht == 0 {
		ht = 10 * time.Second
	}
	mh := px.MaxHeaderBytes
	if mh == 0 {
		mh = 32 << 10
	}
	lim := &headerLimit{r: c}
	lim.n.Store(int64(mh))
	br := bufio.NewReaderSize(lim, 4096)
	deadline := time.Now().Add(ht)
	c.SetReadDeadline(deadline)
	req, err := http.ReadRequest(br)
	if err != nil {
		// Never the error's text: net/http quotes the malformed line or
		// header in it (up to MaxHeaderBytes, a query string, a token).
		rec.Detail = fmt.Sprintf("read request: %s (%d header bytes read)", errorClass(err), int64(mh)-max(lim.n.Load(), 0))
		var ne net.Error
		switch {
		// net/http may report a line cut by the deadline as malformed.
		case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() || !time.Now().Before(deadline):
			rec.Detail = "request header not received within the header timeout"
			reply(c, http.StatusRequestTimeout, "request header timeout")
		case errors.Is(err, errHeaderTooLarge):
			reply(c, http.StatusRequestHeaderFieldsTooLarge, "request header too large")
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		default:
			reply(c, http.StatusBadRequest, "malformed request")
		}
		return
	}
	lim.n.Store(-1)
	c.SetReadDeadline(time.Time{})
	rec.Method = redact.String(req.Method, 16)
	// The target as the ledger keeps it: a query's values by digest.
	rec.Target = redact.URL(req.RequestURI, maxRecordTarget)

	client := px.Client
	if client == nil {
		client = defaultClient
	}
	var t *netpolicy.Target
	if req.Method == http.MethodConnect {
		t, rec.Rule, err = px.Policy.AuthorizeConnect(req.RequestURI)
	} else {
		if !strings.HasPrefix(req.RequestURI, "http://") && !strings.HasPrefix(req.RequestURI, "https://") {
			rec.Detail = "not an absolute-URI request"
			reply(c, http.StatusBadRequest, "only CONNECT and absolute-URI requests")
			return
		}
		switch req.Method {
		case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS":
		default:
			rec.Detail = "method not allowed"
			reply(c, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		if strings.HasPrefix(req.RequestURI, "https://") {
			// A plain request for an https URL would be sent in clear
			// text; clients use CONNECT for https.
			rec.Detail = "https URL without CONNECT"
			reply(c, http.StatusBadRequest, "use CONNECT for https")
			return
		}
		t, rec.Rule, err = px.Policy.AuthorizeURL(req.RequestURI)
	}
	if err != nil {
		rec.Reason, rec.Detail = api.ReasonEgressDenied, err.Error()
		reply(c, http.StatusForbidden, "sluice: egress denied")
		return
	}
	rec.Host, rec.Port = t.Host, t.Port

	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ap, err := client.Resolve(dctx, px.Policy, t)
	if err != nil {
		cancel()
		rec.Reason, _ = errclass.Reason(err)
		rec.Detail = err.Error()
		if errors.Is(err, netpolicy.ErrEgressDenied) {
			reply(c, http.StatusForbidden, "sluice: egress denied")
		} else {
			rec.Verdict = "allow"
			reply(c, http.StatusBadGateway, "sluice: upstream error")
		}
		return
	}
	rec.Addr, rec.Verdict = ap, "allow"
	up, err := newPinnedDialer(client.DialTimeout).dial(dctx, ap)
	cancel()
	if err != nil {
		rec.Reason, rec.Detail = api.ReasonUpstreamError, err.Error()
		reply(c, http.StatusBadGateway, "sluice: upstream error")
		return
	}
	stopUp := context.AfterFunc(ctx, func() { up.Close() })
	defer stopUp()
	defer up.Close()

	idle := px.IdleTimeout
	if idle == 0 {
		idle = 5 * time.Minute
	}
	out := &countingConn{Conn: up, idle: idle, limit: px.Policy.MaxBytesOut()}
	in := &countingConn{Conn: c, idle: idle}
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
			rec.Reason, rec.Detail = api.ReasonUpstreamError, err.Error()
			return
		}
		// Bytes the client pipelined after the header are in br.
		rec.Reason, rec.Detail = pipe(out, in, br, idle)
	} else {
		rec.Reason, rec.Detail = forward(ctx, req, t, out, in, idle)
	}
	rec.BytesOut, rec.BytesIn = out.written.Load(), in.written.Load()
}

// forward sends one plain-HTTP request upstream — origin-form, the Host
// header set from the authorized URL, hop-by-hop and Proxy-* headers
// removed, Connection: close — and copies the response back. A copy cut
// because the proxy stopped (the command's call ended: ctx) or because
// the client went away is no upstream error: the client read what it
// wanted (curl closes once it has Content-Length bytes), and the record
// says how the relay ended.
func forward(ctx context.Context, req *http.Request, t *netpolicy.Target, up, client *countingConn, idle time.Duration) (api.Reason, string) {
	req.RequestURI = ""
	req.URL = t.URL
	req.Host = t.URL.Host
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade"} {
		req.Header.Del(h)
	}
	req.Close = true
	// The client may hold its body until told to continue; say so here
	// rather than relay the interim response (req.Write needs the body).
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		req.Header.Del("Expect")
		if _, err := io.WriteString(client, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return api.ReasonUpstreamError, "write 100-continue: " + err.Error()
		}
	}
	up.SetDeadline(time.Now().Add(idle))
	if err := req.Write(up); err != nil {
		// net/http does not always wrap the writer's error.
		if errors.Is(err, errLimitOut) || up.limit > 0 && up.written.Load() >= up.limit {
			return api.ReasonLimitExceeded, "max_bytes_out reached"
		}
		return api.ReasonUpstreamError, "write request: " + err.Error()
	}
	// The deadline moves with each read: a long, active download is not idle.
	var writeErr error
	if _, err := io.Copy(writerFunc(func(p []byte) (int, error) {
		n, err := client.Write(p)
		if err != nil {
			writeErr = err
		}
		return n, err
	}), readerFunc(func(p []byte) (int, error) {
		up.SetReadDeadline(time.Now().Add(idle))
		return up.Conn.Read(p)
	})); err != nil {
		switch {
		case ctx.Err() != nil:
			return api.ReasonAllowed, "cut when the call ended: " + err.Error()
		case writeErr != nil:
			return api.ReasonAllowed, "the client went away: " + err.Error()
		}
		return api.ReasonUpstreamError, "copy response: " + err.Error()
	}
	return api.ReasonAllowed, ""
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// pipe copies both ways until either side ends, no byte moves either way
// for idle, or max_bytes_out is reached.
func pipe(up, client *countingConn, pending *bufio.Reader, idle time.Duration) (api.Reason, string) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	// idleRead reads with a deadline, retrying while the other direction
	// is active: a long download with a silent client is not idle.
	idleRead := func(setDeadline func(time.Time) error, read func([]byte) (int, error)) io.Reader {
		return readerFunc(func(p []byte) (int, error) {
			for {
				setDeadline(time.Now().Add(idle))
				n, err := read(p)
				if n > 0 {
					last.Store(time.Now().UnixNano())
				}
				if err != nil && n == 0 && errors.Is(err, os.ErrDeadlineExceeded) &&
					time.Since(time.Unix(0, last.Load())) < idle {
					continue
				}
				return n, err
			}
		})
	}
	errc := make(chan error, 2)
	go func() {
		// client → upstream, starting with what the header reader buffered.
		_, err := io.Copy(up, idleRead(client.SetReadDeadline, pending.Read))
		if err == nil {
			if cw, ok := up.Conn.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
		} else {
			client.Close()
			up.Close()
		}
		errc <- err
	}()
	go func() {
		_, err := io.Copy(client, idleRead(up.SetReadDeadline, up.Conn.Read))
		// The upstream finished (or failed): end the tunnel.
		client.Close()
		up.Close()
		errc <- err
	}()
	err1 := <-errc
	err2 := <-errc
	for _, err := range []error{err1, err2} {
		if errors.Is(err, errLimitOut) {
			return api.ReasonLimitExceeded, "max_bytes_out reached"
		}
	}
	for _, err := range []error{err1, err2} {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return api.ReasonAllowed, "idle timeout"
		}
	}
	return api.ReasonAllowed, ""
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

var errLimitOut = errors.New("max_bytes_out reached")

// countingConn counts bytes written to it (so: bytes toward that side),
// refreshes the write deadline, and enforces an optional byte cap.
type countingConn struct {
	net.Conn
	idle    time.Duration
	limit   int64
	written atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	var over bool
	if c.limit > 0 {
		room := c.limit - c.written.Load()
		if room <= 0 {
			return 0, errLimitOut
		}
		if int64(len(p)) > room {
			p, over = p[:room], true
		}
	}
	c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	if err == nil && over {
		err = errLimitOut
	}
	return n, err
}

// ReadFrom and WriteTo are hidden so io.Copy goes through Write (counted).
func (c *countingConn) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(struct{ io.Writer }{c}, r)
}

func reply(c net.Conn, code int, msg string) {
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	body := msg + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}
