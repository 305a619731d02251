package egress

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/egress/netpolicy"
)

// TestReview5ProxySmuggling (the fifth review): bytes a command sends after
// its one authorized request — a pipelined request for another host, a
// body framed twice (Content-Length and chunked), a request hidden in a
// chunked body — never become a request upstream, and a redirect comes back
// to the command rather than being followed by the proxy.
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
