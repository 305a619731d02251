package egress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/egress/netpolicy"
)

func TestFetchAllowed(t *testing.T) {
	srv := newServer(t, []string{"api.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "api.test:"+portOf(r) && !strings.HasPrefix(r.Host, "api.test:") {
			t.Errorf("Host header %q", r.Host)
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello "+r.URL.Path+" accept="+r.Header.Get("Accept"))
	}))
	res := newResolver("api.test", "127.0.0.1")
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"api.test:" + srv.port}, InsecureAllowPrivate: true})
	r, err := fetchClient(res).Fetch(context.Background(), p, FetchRequest{
		URL: "https://API.test:" + srv.port + "/hello", Headers: map[string]string{"accept": "text/plain"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != 200 || string(r.Body) != "hello /hello accept=text/plain" || r.ContentType != "text/plain" || r.Truncated {
		t.Fatalf("result %+v body %q", r, r.Body)
	}
	want := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), atoiPort(t, srv.port))
	if r.Addr != want || len(r.Hops) != 1 || r.Hops[0].Addr != want || r.Rule.Entry != "api.test:"+srv.port {
		t.Fatalf("addr %v hops %+v rule %v", r.Addr, r.Hops, r.Rule)
	}
	if r.URL != "https://api.test:"+srv.port+"/hello" {
		t.Fatalf("final URL %q", r.URL)
	}
	if n := res.count("api.test"); n != 1 {
		t.Fatalf("api.test looked up %d times, want once", n)
	}
	// HEAD: no body.
	r, err = fetchClient(res).Fetch(context.Background(), p, FetchRequest{URL: "https://api.test:" + srv.port + "/", Method: "HEAD"})
	if err != nil || r.Status != 200 || len(r.Body) != 0 {
		t.Fatalf("HEAD: %+v %v", r, err)
	}
	if _, err := fetchClient(res).Fetch(context.Background(), p, FetchRequest{URL: "https://api.test:" + srv.port + "/", Method: "DELETE"}); !errors.Is(err, netpolicy.ErrInvalidRequest) {
		t.Fatalf("DELETE: %v", err)
	}
}

func portOf(r *http.Request) string {
	_, p, _ := net.SplitHostPort(r.Host)
	return p
}

// TLS is verified against the URL's name, not the address: the server at
// the pinned address only has a certificate for api.test.
func TestFetchTLSNameMismatch(t *testing.T) {
	srv := newServer(t, []string{"api.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"other.test:" + srv.port}, InsecureAllowPrivate: true})
	_, err := fetchClient(newResolver("other.test", "127.0.0.1")).Fetch(context.Background(), p, FetchRequest{URL: "https://other.test:" + srv.port + "/"})
	var ue *UpstreamError
	if !errors.As(err, &ue) || ue.Op != "tls" || reasonOf(err) != api.ReasonUpstreamError {
		t.Fatalf("got %v, want a tls upstream error", err)
	}
	if srv.hits.Load() != 0 {
		t.Fatal("request reached a server whose certificate did not match")
	}
}

func TestFetchTruncates(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 10000) // 100000 bytes
	srv := newServer(t, []string{"api.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(body[:len(body)-len(r.URL.Query().Get("short"))])
	}))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"api.test:" + srv.port}, InsecureAllowPrivate: true, MaxBytes: 1000})
	c := fetchClient(newResolver("api.test", "127.0.0.1"))
	r, err := c.Fetch(context.Background(), p, FetchRequest{URL: "https://api.test:" + srv.port + "/"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Truncated || r.Bytes != 1000 || !bytes.Equal(r.Body, body[:1000]) {
		t.Fatalf("truncated=%v bytes=%d", r.Truncated, r.Bytes)
	}
	// Exactly max_bytes is not truncated.
	p = mustPolicy(t, netpolicy.Config{Hosts: []string{"api.test:" + srv.port}, InsecureAllowPrivate: true, MaxBytes: int64(len(body))})
	r, err = c.Fetch(context.Background(), p, FetchRequest{URL: "https://api.test:" + srv.port + "/"})
	if err != nil || r.Truncated || r.Bytes != int64(len(body)) {
		t.Fatalf("at the cap: truncated=%v bytes=%d err=%v", r.Truncated, r.Bytes, err)
	}
}

func TestFetchSlowBodyTimesOut(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := newServer(t, []string{"api.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first bytes")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"api.test:" + srv.port}, InsecureAllowPrivate: true, Timeout: 300 * time.Millisecond})
	r, err := fetchClient(newResolver("api.test", "127.0.0.1")).Fetch(context.Background(), p, FetchRequest{URL: "https://api.test:" + srv.port + "/"})
	var ue *UpstreamError
	if !errors.As(err, &ue) || !ue.Timeout() || reasonOf(err) != api.ReasonUpstreamError {
		t.Fatalf("got %v, want an upstream timeout (result %+v)", err, r)
	}
	// A cancelled parent is cancellation, not an upstream failure.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = fetchClient(newResolver("api.test", "127.0.0.1")).Fetch(ctx, p, FetchRequest{URL: "https://api.test:" + srv.port + "/"})
	if reasonOf(err) != api.ReasonCancelled {
		t.Fatalf("cancelled: %v (reason %s)", err, reasonOf(err))
	}
}

// A redirect to an undeclared host is refused before anything is sent
// there — before its name is even looked up.
func TestFetchRedirectToUndeclaredHost(t *testing.T) {
	evil := newServer(t, []string{"evil.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "exfiltrated "+r.URL.RawQuery)
	}))
	other := newServer(t, []string{"other.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			t.Errorf("Authorization followed a redirect to another host")
		}
		io.WriteString(w, "other ok")
	}))
	api := newServer(t, []string{"api.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/start":
			http.Redirect(w, r, "/mid", http.StatusFound)
		case "/mid":
			http.Redirect(w, r, "https://evil.test:"+evil.port+"/x?secret=1", http.StatusFound)
		case "/declared":
			http.Redirect(w, r, "https://other.test:"+other.port+"/y", http.StatusTemporaryRedirect)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/downgrade":
			http.Redirect(w, r, "http://api.test:"+portOf(r)+"/", http.StatusFound)
		}
	}))
	res := newResolver("api.test", "127.0.0.1", "evil.test", "127.0.0.1", "other.test", "127.0.0.1")
	p := mustPolicy(t, netpolicy.Config{
		Hosts:                []string{"api.test:" + api.port, "other.test:" + other.port},
		InsecureAllowPrivate: true, AllowedHeaders: []string{"Accept", "Authorization"},
	})
	c := fetchClient(res)
	r, err := c.Fetch(context.Background(), p, FetchRequest{URL: "https://api.test:" + api.port + "/start"})
	if !errors.Is(err, netpolicy.ErrEgressDenied) || !strings.Contains(err.Error(), "redirect 2") {
		t.Fatalf("got %v, want egress denied at redirect 2", err)
	}
	if evil.hits.Load() != 0 || res.count("evil.test") != 0 {
		t.Fatalf("undeclared host saw %d requests, %d lookups", evil.hits.Load(), res.count("evil.test"))
	}
	if r == nil || len(r.Hops) != 3 || r.Hops[0].Status != 302 || r.Hops[1].Status != 302 || r.Hops[2].Addr.IsValid() {
		t.Fatalf("hops %+v", r.Hops)
	}
	// A redirect to a declared host is followed, without the credential.
	r, err = c.Fetch(context.Background(), p, FetchRequest{URL: "https://api.test:" + api.port + "/declared",
		Headers: map[string]string{"Authorization": "Bearer t"}})
	if err != nil || string(r.Body) != "other ok" || len(r.Hops) != 2 || r.Rule.Index != 1 {
		t.Fatalf("declared redirect: %+v %v", r, err)
	}
	// max_redirects (default 3).
	_, err = c.Fetch(context.Background(), p, FetchRequest{URL: "https://api.test:" + api.port + "/loop"})
	if !errors.Is(err, netpolicy.ErrEgressDenied) || !strings.Contains(err.Error(), "max_redirects") {
		t.Fatalf("loop: %v", err)
	}
	// A downgrade to http is a new URL, refused by schemes.
	_, err = c.Fetch(context.Background(), p, FetchRequest{URL: "https://api.test:" + api.port + "/downgrade"})
	if !errors.Is(err, netpolicy.ErrEgressDenied) {
		t.Fatalf("downgrade: %v", err)
	}
}

func TestFetchLoopbackNeedsOptIn(t *testing.T) {
	srv := newServer(t, []string{"api.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"api.test:" + srv.port}})
	_, err := fetchClient(newResolver("api.test", "127.0.0.1")).Fetch(context.Background(), p, FetchRequest{URL: "https://api.test:" + srv.port + "/"})
	if !errors.Is(err, netpolicy.ErrEgressDenied) || reasonOf(err) != api.ReasonEgressDenied || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("got %v, want egress denied (loopback)", err)
	}
	if srv.hits.Load() != 0 {
		t.Fatal("loopback server was reached")
	}
}

// Rebinding: the name's answer mixes a public address (never
// dialed) with loopback; the whole answer is refused and nothing is
// dialed.
func TestFetchRebinding(t *testing.T) {
	srv := newServer(t, []string{"rebind.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	res := newResolver()
	res.add("rebind.test", "8.8.8.8", "127.0.0.1")
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"rebind.test:" + srv.port}})
	r, err := fetchClient(res).Fetch(context.Background(), p, FetchRequest{URL: "https://rebind.test:" + srv.port + "/"})
	if !errors.Is(err, netpolicy.ErrEgressDenied) || !strings.Contains(err.Error(), "127.0.0.1 is loopback") {
		t.Fatalf("got %v, want egress denied naming 127.0.0.1", err)
	}
	if r != nil && r.Addr.IsValid() {
		t.Fatalf("dialed %v", r.Addr)
	}
	if srv.hits.Load() != 0 {
		t.Fatal("server reached")
	}
}

// A 1 GiB body into a 64 KiB cap: memory stays flat (the body is read to
// max_bytes+1 and the connection dropped).
func TestFetchHugeBodyFlatMemory(t *testing.T) {
	const total = 1 << 30
	var sent atomic.Int64
	srv := newServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1073741824")
		chunk := make([]byte, 64<<10)
		for sent.Load() < total {
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"big.test:" + srv.port}, Schemes: []string{"http"}, InsecureAllowPrivate: true, MaxBytes: 64 << 10})
	c := fetchClient(newResolver("big.test", "127.0.0.1"))
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r, err := c.Fetch(context.Background(), p, FetchRequest{URL: "http://big.test:" + srv.port + "/"})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Truncated || r.Bytes != 64<<10 {
		t.Fatalf("truncated=%v bytes=%d", r.Truncated, r.Bytes)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d KiB for a 1 GiB body capped at 64 KiB (server sent %d KiB before the drop)", alloc>>10, sent.Load()>>10)
	if alloc > 32<<20 {
		t.Fatalf("allocated %d bytes: memory is not flat", alloc)
	}
}

func TestFetchHeaders(t *testing.T) {
	var got atomic.Value
	srv := newServer(t, []string{"api.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Clone())
	}))
	res := newResolver("api.test", "127.0.0.1")
	url := "https://api.test:" + srv.port + "/"
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"api.test:" + srv.port}, InsecureAllowPrivate: true})
	c := fetchClient(res)
	for _, h := range []map[string]string{
		{"Authorization": "Bearer x"},
		{"Cookie": "a=b"},
		{"Host": "evil.test"},
		{"X-Forwarded-For": "1.2.3.4"},
		{"Accept": "text/html\r\nX-Injected: 1"},
		{"Accept": "a\nb"},
		{"Accept": "a\x00b"},
		{"Accept\r\nX-Injected": "1"},
		{"Bad Name": "1"},
	} {
		if _, err := c.Fetch(context.Background(), p, FetchRequest{URL: url, Headers: h}); !errors.Is(err, netpolicy.ErrEgressDenied) {
			t.Errorf("headers %q: %v, want egress denied", h, err)
		}
	}
	if srv.hits.Load() != 0 {
		t.Fatal("a refused header reached the server")
	}
	p = mustPolicy(t, netpolicy.Config{Hosts: []string{"api.test:" + srv.port}, InsecureAllowPrivate: true, AllowedHeaders: []string{"Accept", "X-Api-Key"}})
	if _, err := c.Fetch(context.Background(), p, FetchRequest{URL: url, Headers: map[string]string{"x-api-key": "k", "Accept": "*/*"}}); err != nil {
		t.Fatal(err)
	}
	h := got.Load().(http.Header)
	if h.Get("X-Api-Key") != "k" || h.Get("Accept") != "*/*" {
		t.Fatalf("server saw %v", h)
	}
}

func TestFetchUpstreamErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close() // nothing listens there now: connection refused
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"down.test:" + port, "nxdomain.test"}, InsecureAllowPrivate: true})
	c := fetchClient(newResolver("down.test", "127.0.0.1"))
	r, err := c.Fetch(context.Background(), p, FetchRequest{URL: "https://down.test:" + port + "/"})
	if !errors.Is(err, ErrUpstream) || reasonOf(err) != api.ReasonUpstreamError || r == nil || !r.Addr.IsValid() {
		t.Fatalf("connection refused: %v %+v", err, r)
	}
	_, err = c.Fetch(context.Background(), p, FetchRequest{URL: "https://nxdomain.test/"})
	var ue *UpstreamError
	if !errors.As(err, &ue) || ue.Op != "resolve" {
		t.Fatalf("unknown name: %v", err)
	}
}

// HTTPS_PROXY in the environment is ignored: the request goes to the
// pinned address, the "proxy" sees nothing.
func TestFetchIgnoresProxyEnv(t *testing.T) {
	proxy := newServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Setenv("HTTPS_PROXY", proxy.URL)
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("https_proxy", proxy.URL)
	srv := newServer(t, []string{"api.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "direct") }))
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"api.test:" + srv.port}, InsecureAllowPrivate: true})
	r, err := fetchClient(newResolver("api.test", "127.0.0.1")).Fetch(context.Background(), p, FetchRequest{URL: "https://api.test:" + srv.port + "/"})
	if err != nil || string(r.Body) != "direct" || proxy.hits.Load() != 0 {
		t.Fatalf("%v %+v proxy hits %d", err, r, proxy.hits.Load())
	}
}

func TestPost(t *testing.T) {
	type seen struct {
		ct, path string
		body     []byte
	}
	var got atomic.Value
	srv := newServer(t, []string{"hooks.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(seen{r.Header.Get("Content-Type"), r.URL.Path, b})
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "https://evil.test/", http.StatusTemporaryRedirect)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	p := mustPolicy(t, netpolicy.Config{Webhooks: []string{"https://hooks.test:" + srv.port + "/*"}, InsecureAllowPrivate: true, MaxRequestBytes: 1024})
	c := fetchClient(newResolver("hooks.test", "127.0.0.1"))
	body := json.RawMessage(`{"text":"build passed"}`)
	r, err := c.Post(context.Background(), p, PostRequest{URL: "https://hooks.test:" + srv.port + "/notify", Body: body})
	if err != nil {
		t.Fatal(err)
	}
	s := got.Load().(seen)
	if r.Status != 200 || string(r.Body) != `{"ok":true}` || s.ct != "application/json" || string(s.body) != string(body) || r.Rule.Key != "webhooks" {
		t.Fatalf("result %+v, server saw %+v", r, s)
	}
	digest, n := BodyDigest(body)
	sum := sha256.Sum256(body)
	if n != len(body) || digest != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("digest %s %d", digest, n)
	}
	hits := srv.hits.Load()
	for _, c2 := range []struct {
		req  PostRequest
		want error
	}{
		{PostRequest{URL: "https://hooks.test:" + srv.port + "/a/b", Body: body}, netpolicy.ErrEgressDenied},
		{PostRequest{URL: "https://evil.test/x", Body: body}, netpolicy.ErrEgressDenied},
	} {
		if _, err := c.Post(context.Background(), p, c2.req); !errors.Is(err, c2.want) {
			t.Errorf("%s: %v, want %v", c2.req.URL, err, c2.want)
		}
	}
	if srv.hits.Load() != hits {
		t.Fatal("a refused post reached the server")
	}
	// Redirects are not followed: the 307 is the result.
	r, err = c.Post(context.Background(), p, PostRequest{URL: "https://hooks.test:" + srv.port + "/redirect", Body: body})
	if err != nil || r.Status != 307 || len(r.Hops) != 1 {
		t.Fatalf("redirect: %+v %v", r, err)
	}
	// Loopback without the opt-in.
	p = mustPolicy(t, netpolicy.Config{Webhooks: []string{"https://hooks.test:" + srv.port + "/*"}})
	if _, err := c.Post(context.Background(), p, PostRequest{URL: "https://hooks.test:" + srv.port + "/n", Body: body}); !errors.Is(err, netpolicy.ErrEgressDenied) {
		t.Fatalf("loopback post: %v", err)
	}
}

// A name answered with ::1 or an IPv4-mapped loopback address: refused
// without the opt-in, dialed (unmapped) with it.
func TestFetchIPv6AndMappedAnswers(t *testing.T) {
	srv4 := newServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "v4") }))
	l6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatalf("this test needs IPv6 loopback: %v", err)
	}
	srv6 := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "v6") })}
	go srv6.Serve(l6)
	t.Cleanup(func() { srv6.Close() })
	_, port6, _ := net.SplitHostPort(l6.Addr().String())

	res := newResolver("v6.test", "::1", "mapped.test", "::ffff:127.0.0.1")
	c := fetchClient(res)
	for _, tc := range []struct {
		host, port, want string
	}{
		{"v6.test", port6, "v6"},
		{"mapped.test", srv4.port, "v4"},
	} {
		url := "http://" + tc.host + ":" + tc.port + "/"
		cfg := netpolicy.Config{Hosts: []string{tc.host + ":" + tc.port}, Schemes: []string{"http"}}
		if _, err := c.Fetch(context.Background(), mustPolicy(t, cfg), FetchRequest{URL: url}); !errors.Is(err, netpolicy.ErrEgressDenied) {
			t.Fatalf("%s without the opt-in: %v", tc.host, err)
		}
		cfg.InsecureAllowPrivate = true
		r, err := c.Fetch(context.Background(), mustPolicy(t, cfg), FetchRequest{URL: url})
		if err != nil || string(r.Body) != tc.want {
			t.Fatalf("%s: %v %+v", tc.host, err, r)
		}
		if tc.host == "mapped.test" && !r.Addr.Addr().Is4() {
			t.Fatalf("mapped answer dialed as %v, want the IPv4 address", r.Addr)
		}
	}
}

// The pinned dialer dials only what was pinned: a host:port nobody
// authorized is refused without a lookup or a connect.
func TestPinnedDialerRefusesUnpinned(t *testing.T) {
	pd := newPinnedDialer(0)
	pd.pin("api.test:443", netip.MustParseAddrPort("127.0.0.1:9"))
	if _, err := pd.DialContext(context.Background(), "tcp", "evil.test:443"); !errors.Is(err, netpolicy.ErrEgressDenied) {
		t.Fatalf("unpinned dial: %v", err)
	}
	if _, err := pd.DialContext(context.Background(), "tcp", "api.test:8443"); !errors.Is(err, netpolicy.ErrEgressDenied) {
		t.Fatalf("pinned host, other port: %v", err)
	}
}

// The executor sends the request it was given to the address it was
// given — the one the caller decided on — and looks nothing up, though the
// name now answers another address; without a decided address it sends
// nothing.
func TestFetchSendsToTheDecidedAddress(t *testing.T) {
	srv := newServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Method+" decided") }))
	res := newResolver("moving.test", "127.0.0.2") // what the name answers now
	c := testClient(res)
	p := mustPolicy(t, netpolicy.Config{Hosts: []string{"moving.test:" + srv.port}, Schemes: []string{"http"},
		Webhooks: []string{"http://moving.test:" + srv.port + "/hooks/*"}, InsecureAllowPrivate: true})
	decided := netip.MustParseAddr("127.0.0.1")
	ft, err := netpolicy.ParseURL("http://moving.test:" + srv.port + "/x")
	if err != nil {
		t.Fatal(err)
	}
	fr, err := p.AuthorizeFetch(ft, "GET", nil)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := netpolicy.ParseURL("http://moving.test:" + srv.port + "/hooks/y")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := p.AuthorizePost(pt)
	if err != nil {
		t.Fatal(err)
	}
	want := netip.AddrPortFrom(decided, atoiPort(t, srv.port))
	r, err := c.Fetch(context.Background(), p, fr, decided)
	if err != nil || string(r.Body) != "GET decided" || r.Addr != want {
		t.Fatalf("fetch: %v %+v", err, r)
	}
	r, err = c.Post(context.Background(), p, pr, decided, []byte(`{}`))
	if err != nil || string(r.Body) != "POST decided" || r.Addr != want {
		t.Fatalf("post: %v %+v", err, r)
	}
	hits := srv.hits.Load()
	if _, err := c.Fetch(context.Background(), p, fr, netip.Addr{}); !errors.Is(err, netpolicy.ErrEgressDenied) {
		t.Fatalf("fetch without a decided address: %v", err)
	}
	if _, err := c.Post(context.Background(), p, pr, netip.Addr{}, []byte(`{}`)); !errors.Is(err, netpolicy.ErrEgressDenied) {
		t.Fatalf("post without a decided address: %v", err)
	}
	// A request is sent only as what it was authorized as.
	if _, err := c.Fetch(context.Background(), p, pr, decided); !errors.Is(err, netpolicy.ErrEgressDenied) {
		t.Fatalf("a post's request fetched: %v", err)
	}
	if _, err := c.Post(context.Background(), p, fr, decided, []byte(`{}`)); !errors.Is(err, netpolicy.ErrEgressDenied) {
		t.Fatalf("a fetch's request posted: %v", err)
	}
	if _, err := c.Fetch(context.Background(), p, &netpolicy.Request{}, decided); !errors.Is(err, netpolicy.ErrEgressDenied) {
		t.Fatalf("a request never authorized: %v", err)
	}
	if n := res.count("moving.test"); n != 0 || srv.hits.Load() != hits {
		t.Fatalf("%d lookups, %d requests after the decided ones, want none", n, srv.hits.Load()-hits)
	}
}
