package egress

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/egress/netpolicy"
)

// BenchmarkFetchLocal compares a Fetch of a local URL (parse, authorize,
// resolve, check, pinned dial, one request) with Go's http.Get of the same
// URL, over fresh connections and over a kept-alive one. Compare the ns/op
// of the sub-benchmarks in one run:
//
//	go test -run XXX -bench FetchLocal -count 5 ./egress/
func BenchmarkFetchLocal(b *testing.B) {
	body := make([]byte, 4096)
	srv := newServer(b, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	url := "http://bench.test:" + srv.port + "/"
	direct := "http://127.0.0.1:" + srv.port + "/"
	p := mustPolicy(b, netpolicy.Config{Hosts: []string{"bench.test:" + srv.port}, Schemes: []string{"http"}, InsecureAllowPrivate: true})
	c := fetchClient(newResolver("bench.test", "127.0.0.1"))
	b.Run("egress", func(b *testing.B) {
		for b.Loop() {
			r, err := c.Fetch(context.Background(), p, FetchRequest{URL: url})
			if err != nil || r.Bytes != 4096 {
				b.Fatal(err)
			}
		}
	})
	for _, keep := range []bool{false, true} {
		name := "direct-fresh-conn"
		if keep {
			name = "direct-keepalive"
		}
		b.Run(name, func(b *testing.B) {
			hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: !keep}}
			defer hc.CloseIdleConnections()
			for b.Loop() {
				resp, err := hc.Get(direct)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if n != 4096 {
					b.Fatal(n)
				}
			}
		})
	}
}

// BenchmarkProxyThroughput downloads 64 MiB through a CONNECT tunnel of
// the Proxy and directly; MB/s is the figure to compare:
//
//	go test -run XXX -bench ProxyThroughput -count 3 ./egress/
func BenchmarkProxyThroughput(b *testing.B) {
	const size = 64 << 20
	chunk := make([]byte, 256<<10)
	srv := newServer(b, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	p := mustPolicy(b, netpolicy.Config{Hosts: []string{"bench.test:" + srv.port}, Schemes: []string{"http"}, InsecureAllowPrivate: true})
	env := startBenchProxy(b, &Proxy{Client: testClient(newResolver("bench.test", "127.0.0.1")), Policy: p})
	get := func(b *testing.B, hc *http.Client, url string) {
		resp, err := hc.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n != size {
			b.Fatalf("got %d bytes", n)
		}
	}
	b.Run("proxy", func(b *testing.B) {
		b.SetBytes(size)
		hc := env.client()
		for b.Loop() {
			get(b, hc, "http://bench.test:"+srv.port+"/")
			<-env.records
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(size)
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		for b.Loop() {
			get(b, hc, "http://127.0.0.1:"+srv.port+"/")
		}
	})
}

func startBenchProxy(b *testing.B, px *Proxy) *proxyEnv {
	l, err := net.Listen("unix", b.TempDir()+"/egress.sock")
	if err != nil {
		b.Fatal(err)
	}
	e := &proxyEnv{sock: l.Addr().String(), records: make(chan ConnRecord, 100), done: make(chan error, 1)}
	px.OnConn = func(r ConnRecord) { e.records <- r }
	ctx, cancel := context.WithCancel(context.Background())
	go func() { e.done <- px.Serve(ctx, l) }()
	b.Cleanup(func() { cancel(); <-e.done })
	return e
}
