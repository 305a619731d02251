package egress

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/egress/netpolicy"
	"github.com/sluicehq/sluice/internal/redact"
)

// proxyEnv is a Proxy serving on a unix socket, as the daemon runs it,
// with its connection records on a channel.
type proxyEnv struct {
	sock    string
	records chan ConnRecord
	done    chan error
	cancel  context.CancelFunc
}

func startProxy(t *testing.T, px *Proxy) *proxyEnv {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "egress.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	e := &proxyEnv{sock: sock, records: make(chan ConnRecord, 100), done: make(chan error, 1)}
	px.OnConn = func(r ConnRecord) { e.records <- r }
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() { e.done <- px.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-e.done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return after cancel")
		}
	})
	return e
}

// client is an HTTP client whose proxy is the unix socket (as a command's
// forwarder in the container would reach it).
func (e *proxyEnv) client() *http.Client {
	proxyURL, _ := url.Parse("http://sluice-proxy")
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(proxyURL),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", e.sock)
		},
		TLSClientConfig:   &tls.Config{RootCAs: getCA(nil).pool},
		DisableKeepAlives: true,
	}}
}

func (e *proxyEnv) dial(t *testing.T) net.Conn {
	c, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// raw sends a raw request and returns the status line's code.
func (e *proxyEnv) raw(t *testing.T, req string) int {
	c := e.dial(t)
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (e *proxyEnv) record(t *testing.T) ConnRecord {
	t.Helper()
	select {
	case r := <-e.records:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no connection record")
	}
	return ConnRecord{}
}

func TestProxyConnect(t *testing.T) {
	apiSrv := newServer(t, []string{"api.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "through the tunnel")
	}))
	other := newServer(t, []string{"other.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"api.test:" + apiSrv.port}, InsecureAllowPrivate: true})
	e := startProxy(t, &Proxy{Client: testClient(newResolver("api.test", "127.0.0.1", "other.test", "127.0.0.1")), Policy: p})

	resp, err := e.client().Get("https://api.test:" + apiSrv.port + "/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "through the tunnel" {
		t.Fatalf("body %q", b)
	}
	r := e.record(t)
	if r.Method != "CONNECT" || r.Host != "api.test" || r.Addr.String() != "127.0.0.1:"+apiSrv.port ||
		r.Verdict != "allow" || r.Reason != api.ReasonAllowed || r.BytesIn == 0 || r.BytesOut == 0 || r.Rule.Index != 0 {
		t.Fatalf("record %+v", r)
	}

	// Another host: 403 and a record; that host sees nothing.
	if code := e.raw(t, "CONNECT other.test:"+other.port+" HTTP/1.1\r\nHost: other.test:"+other.port+"\r\n\r\n"); code != 403 {
		t.Fatalf("CONNECT to an undeclared host: %d", code)
	}
	r = e.record(t)
	if r.Verdict != "deny" || r.Reason != api.ReasonEgressDenied || r.Addr.IsValid() || other.hits.Load() != 0 {
		t.Fatalf("record %+v, other hits %d", r, other.hits.Load())
	}
	// The Go client sees the refusal too.
	if _, err := e.client().Get("https://other.test:" + other.port + "/"); err == nil {
		t.Fatal("client reached an undeclared host")
	}
	e.record(t)
	// A declared host on a port its entry does not allow, and a raw IP.
	for _, target := range []string{"api.test:443", "127.0.0.1:" + apiSrv.port} {
		if code := e.raw(t, "CONNECT "+target+" HTTP/1.1\r\n\r\n"); code != 403 {
			t.Fatalf("CONNECT %s: %d", target, code)
		}
		if r := e.record(t); r.Reason != api.ReasonEgressDenied {
			t.Fatalf("CONNECT %s: %+v", target, r)
		}
	}
}

func TestProxyLoopbackNeedsOptIn(t *testing.T) {
	apiSrv := newServer(t, []string{"api.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"api.test:" + apiSrv.port}})
	e := startProxy(t, &Proxy{Client: testClient(newResolver("api.test", "127.0.0.1")), Policy: p})
	if code := e.raw(t, "CONNECT api.test:"+apiSrv.port+" HTTP/1.1\r\n\r\n"); code != 403 {
		t.Fatalf("got %d", code)
	}
	if r := e.record(t); r.Reason != api.ReasonEgressDenied || !strings.Contains(r.Detail, "loopback") {
		t.Fatalf("record %+v", r)
	}
}

func TestProxyPlainHTTP(t *testing.T) {
	srv := newServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Connection") != "" || r.Header.Get("Proxy-Authorization") != "" {
			t.Errorf("proxy headers forwarded: %v", r.Header)
		}
		io.WriteString(w, "plain "+r.Host+" "+r.URL.RequestURI())
	}))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"plain.test:" + srv.port}, Schemes: []string{"http"}, InsecureAllowPrivate: true})
	e := startProxy(t, &Proxy{Client: testClient(newResolver("plain.test", "127.0.0.1")), Policy: p})
	resp, err := e.client().Get("http://PLAIN.test:" + srv.port + "/p?q=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "plain plain.test:"+srv.port+" /p?q=1" {
		t.Fatalf("body %q", b)
	}
	if r := e.record(t); r.Method != "GET" || r.Verdict != "allow" || r.Reason != api.ReasonAllowed || r.BytesIn == 0 {
		t.Fatalf("record %+v", r)
	}
	// Expect: 100-continue is answered by the proxy, then the body flows.
	c := e.dial(t)
	io.WriteString(c, "POST http://plain.test:"+srv.port+"/post HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("want 100 Continue, got %q %v", line, err)
	}
	br.ReadString('\n')
	io.WriteString(c, "body")
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after 100-continue: %v %v", resp, err)
	}
	resp.Body.Close()
	e.record(t)
	// Malformed or unsupported input.
	for _, c := range []struct {
		req  string
		code int
	}{
		{"GET /relative HTTP/1.1\r\nHost: plain.test\r\n\r\n", 400},
		{"TRACE http://plain.test:" + srv.port + "/ HTTP/1.1\r\n\r\n", 405},
		{"GET https://plain.test:" + srv.port + "/ HTTP/1.1\r\n\r\n", 400},
		{"garbage\r\n\r\n", 400},
		{"GET http://evil.test/ HTTP/1.1\r\n\r\n", 403},
		{"GET http://plain.test:" + srv.port + "@evil.test/ HTTP/1.1\r\n\r\n", 403},
		{"GET http://plain.test:" + srv.port + "/ HTTP/1.1\r\nX: " + strings.Repeat("a", 40<<10) + "\r\n\r\n", 431},
	} {
		if code := e.raw(t, c.req); code != c.code {
			t.Errorf("%.60q: %d, want %d", c.req, code, c.code)
		}
		if r := e.record(t); r.Verdict != "deny" {
			t.Errorf("%.60q: record %+v", c.req, r)
		}
	}
}

// TestProxyRecordsBounded: what a connection record keeps of a request is
// bounded and holds no query value and no bytes of a request that did
// not parse (docs/security.md, "The third review": each malformed request
// line, up to the 32 KiB header cap, was copied into its record's detail,
// and a plain request's query string into its target).
func TestProxyRecordsBounded(t *testing.T) {
	srv := newServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"plain.test:" + srv.port}, Schemes: []string{"http"}, InsecureAllowPrivate: true})
	e := startProxy(t, &Proxy{Client: testClient(newResolver("plain.test", "127.0.0.1")), Policy: p})
	const secret = "SECRET123"
	long := strings.Repeat("x", 32000)
	for _, c := range []struct {
		name, req string
		code      int
		reason    api.Reason
		target    string // the record's target, when the request parsed
	}{
		{"malformed 32 KB line", "GET http://plain.test/?key=" + secret + long + "\r\n\r\n", 400, api.ReasonInvalidArgs, ""},
		{"malformed header line", "GET http://plain.test:" + srv.port + "/ HTTP/1.1\r\nAuthorization " + secret + long + "\r\n\r\n", 400, api.ReasonInvalidArgs, ""},
		{"allowed, key in the query", "GET http://plain.test:" + srv.port + "/p?api_key=" + secret + "&q=1 HTTP/1.1\r\n\r\n", 200, api.ReasonAllowed,
			"http://plain.test:" + srv.port + "/p?api_key=<sha256:" + shortHex(secret) + ">&q=<sha256:" + shortHex("1") + ">"},
		{"refused, key in the query", "GET http://evil.test/?key=" + secret + " HTTP/1.1\r\n\r\n", 403, api.ReasonEgressDenied,
			"http://evil.test/?key=<sha256:" + shortHex(secret) + ">"},
		{"long path", "GET http://plain.test:" + srv.port + "/" + long[:20000] + "?key=" + secret + " HTTP/1.1\r\n\r\n", 403, api.ReasonEgressDenied, ""},
	} {
		if code := e.raw(t, c.req); code != c.code {
			t.Errorf("%s: %d, want %d", c.name, code, c.code)
		}
		r := e.record(t)
		all := fmt.Sprintf("%+v", r)
		switch {
		case r.Reason != c.reason:
			t.Errorf("%s: reason %s, want %s", c.name, r.Reason, c.reason)
		case strings.Contains(all, secret) || c.code == 400 && strings.Contains(all, "xxxxxxxx"):
			t.Errorf("%s: the record holds the request's bytes: %.300s", c.name, all)
		case len(r.Detail) > 256 || len(r.Target) > maxRecordTarget+2*redact.MaxParams*(redact.MaxParamName+30):
			t.Errorf("%s: detail %d bytes, target %d bytes", c.name, len(r.Detail), len(r.Target))
		case c.target != "" && r.Target != c.target:
			t.Errorf("%s: target %q, want %q", c.name, r.Target, c.target)
		}
	}
}

func shortHex(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:8])
}

func TestProxyMaxBytesOut(t *testing.T) {
	got := make(chan int, 1)
	srv := newServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- len(b)
	}))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"plain.test:" + srv.port}, Schemes: []string{"http"}, InsecureAllowPrivate: true, MaxBytesOut: 1000})
	e := startProxy(t, &Proxy{Client: testClient(newResolver("plain.test", "127.0.0.1")), Policy: p})
	_, err := e.client().Post("http://plain.test:"+srv.port+"/up", "application/octet-stream", strings.NewReader(strings.Repeat("x", 100000)))
	if err == nil {
		t.Log("client saw a response")
	}
	r := e.record(t)
	if r.Reason != api.ReasonLimitExceeded || r.BytesOut > 1000 {
		t.Fatalf("record %+v", r)
	}
	select {
	case n := <-got:
		if n >= 100000 {
			t.Fatalf("server got the whole body (%d bytes)", n)
		}
	default:
	}
}

// A client that never finishes its header (slowloris) does not block
// others, and is cut off after HeaderTimeout.
func TestProxySlowloris(t *testing.T) {
	srv := newServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"plain.test:" + srv.port}, Schemes: []string{"http"}, InsecureAllowPrivate: true})
	e := startProxy(t, &Proxy{Client: testClient(newResolver("plain.test", "127.0.0.1")), Policy: p, HeaderTimeout: 2 * time.Second})
	var slow []net.Conn
	for i := 0; i < 5; i++ {
		c := e.dial(t)
		io.WriteString(c, "CONNECT plain.test:")
		slow = append(slow, c)
	}
	resp, err := e.client().Get("http://plain.test:" + srv.port + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Fatalf("body %q", b)
	}
	if r := e.record(t); r.Reason != api.ReasonAllowed {
		t.Fatalf("first record should be the fast client: %+v", r)
	}
	// The slow ones are cut off by the header timeout.
	for _, c := range slow {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 408 ") {
			t.Fatalf("slow client: %q %v, want a 408 then EOF", b, err)
		}
	}
	for range slow {
		if r := e.record(t); r.Verdict != "deny" || !strings.Contains(r.Detail, "header timeout") {
			t.Fatalf("slow record %+v", r)
		}
	}
}

// Stopping the proxy ends open tunnels: nothing outlives Serve, and each
// connection still gets its record.
// TestProxyPlainEndsWithoutUpstreamError: a plain-HTTP relay that ends
// because the proxy stopped (the command's call ended) after the client
// had its whole response, or because the client went away, is recorded
// allowed, not upstream_error (the egress test saw curl_plain recorded
// upstream_error under load: curl exits once it has Content-Length
// bytes, before the proxy reads the upstream's close).
func TestProxyPlainEndsWithoutUpstreamError(t *testing.T) {
	release, more := make(chan struct{}), make(chan struct{})
	srv := newServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/whole": // the whole response, then the connection stays open
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "whole")
			w.(http.Flusher).Flush()
			<-release
		case "/part": // half, then the rest once the client has gone
			w.Header().Set("Content-Length", "8")
			io.WriteString(w, "half")
			w.(http.Flusher).Flush()
			<-more
			io.WriteString(w, "rest")
		}
	}))
	t.Cleanup(func() { close(release) }) // before the server closes (cleanups run last first)
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"plain.test:" + srv.port}, Schemes: []string{"http"}, InsecureAllowPrivate: true})

	e := startProxy(t, &Proxy{Client: testClient(newResolver("plain.test", "127.0.0.1")), Policy: p})
	c := e.dial(t)
	io.WriteString(c, "GET http://plain.test:"+srv.port+"/part HTTP/1.1\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	half := make([]byte, 4)
	if _, err := io.ReadFull(resp.Body, half); err != nil || string(half) != "half" {
		t.Fatalf("first half: %q %v", half, err)
	}
	c.Close()
	close(more)
	if r := e.record(t); r.Verdict != "allow" || r.Reason != api.ReasonAllowed || !strings.Contains(r.Detail, "client went away") {
		t.Errorf("the client went away mid-response: record %+v", r)
	}

	c = e.dial(t)
	io.WriteString(c, "GET http://plain.test:"+srv.port+"/whole HTTP/1.1\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "whole" {
		t.Fatalf("whole: %q %v", b, err)
	}
	e.cancel() // the call ends while the upstream's connection is still open
	if r := e.record(t); r.Verdict != "allow" || r.Reason != api.ReasonAllowed || !strings.Contains(r.Detail, "call ended") {
		t.Errorf("the proxy stopped after the whole response: record %+v", r)
	}
	if err := <-e.done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	e.done <- nil // for the cleanup
}

func TestProxyServeStopsTunnels(t *testing.T) {
	apiSrv := newServer(t, []string{"api.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"api.test:" + apiSrv.port}, InsecureAllowPrivate: true})
	e := startProxy(t, &Proxy{Client: testClient(newResolver("api.test", "127.0.0.1")), Policy: p})
	c := e.dial(t)
	io.WriteString(c, "CONNECT api.test:"+apiSrv.port+" HTTP/1.1\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	e.cancel()
	select {
	case err := <-e.done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
		e.done <- nil // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return with a tunnel open")
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("tunnel still open after Serve returned")
	}
	if r := e.record(t); r.Verdict != "allow" || r.Method != "CONNECT" {
		t.Fatalf("record %+v", r)
	}
}

// TestReview5ProxySmuggling (the fifth review): bytes a command sends after
// its one authorized request — a pipelined request for another host, a
// body framed twice (Content-Length and chunked), a request hidden in a
// chunked body — never become a request upstream, and a redirect comes back
// to the command rather than being followed by the proxy.
// docs/security.md, "The fifth review"
func TestReview5ProxySmuggling(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := newServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RequestURI()+" body="+string(b))
		mu.Unlock()
		if r.URL.Path == "/redir" {
			http.Redirect(w, r, "http://127.0.0.1:1/", http.StatusFound)
			return
		}
		io.WriteString(w, "ok")
	}))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"plain.test:" + srv.port}, Schemes: []string{"http"}, InsecureAllowPrivate: true})
	e := startProxy(t, &Proxy{Client: testClient(newResolver("plain.test", "127.0.0.1", "evil.test", "127.0.0.1")), Policy: p})
	base := "http://plain.test:" + srv.port
	for _, c := range []struct {
		name, req string
		code      int
	}{
		{"pipelined", "GET " + base + "/one HTTP/1.1\r\nHost: evil.test\r\n\r\nGET http://evil.test:" + srv.port + "/two HTTP/1.1\r\n\r\n", 200},
		{"cl-te", "POST " + base + "/p HTTP/1.1\r\nContent-Length: 30\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n", 200},
		{"redirect", "GET " + base + "/redir HTTP/1.1\r\n\r\n", 302},
	} {
		conn := e.dial(t)
		io.WriteString(conn, c.req)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.code)
		}
		if r := e.record(t); r.Verdict != "allow" || r.Host != "plain.test" {
			t.Errorf("%s: record %+v", c.name, r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"GET /one body=", "POST /p body=", "GET /redir body="}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("upstream saw:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}

// TestReview5ProxyAdmit: a connection Admit refuses is answered 503 before
// anything is read or dialed, and makes no record.
// docs/security.md, "The fifth review"
func TestReview5ProxyAdmit(t *testing.T) {
	srv := newServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"plain.test:" + srv.port}, Schemes: []string{"http"}, InsecureAllowPrivate: true})
	var admit atomic.Bool
	admit.Store(true)
	e := startProxy(t, &Proxy{Client: testClient(newResolver("plain.test", "127.0.0.1")), Policy: p, Admit: admit.Load})
	req := "GET http://plain.test:" + srv.port + "/ HTTP/1.1\r\n\r\n"
	if code := e.raw(t, req); code != 200 {
		t.Fatalf("admitted: %d", code)
	}
	e.record(t)
	admit.Store(false)
	if code := e.raw(t, req); code != 503 {
		t.Fatalf("refused: %d, want 503", code)
	}
	select {
	case r := <-e.records:
		t.Fatalf("a refused connection made a record: %+v", r)
	default:
	}
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("upstream hits %d, want 1", n)
	}
}
