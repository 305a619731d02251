package egress

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/egress/netpolicy"
	"github.com/sluicehq/sluice/internal/errclass"
)

// reasonOf is the reason the daemon reports for an error of this package.
func reasonOf(err error) api.Reason {
	r, _ := errclass.Reason(err)
	return r
}

// testCA is a throwaway CA whose leaf certificates name test hosts
// (api.test, other.test, ...), so TLS is verified against the NAME the
// URL gave while every server listens on loopback.
type testCA struct {
	pool *x509.CertPool
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var (
	caOnce sync.Once
	ca     *testCA
)

func getCA(t testing.TB) *testCA {
	caOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber:          big.NewInt(1),
			Subject:               pkix.Name{CommonName: "sluice egress test CA"},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().Add(24 * time.Hour),
			IsCA:                  true,
			KeyUsage:              x509.KeyUsageCertSign,
			BasicConstraintsValid: true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			panic(err)
		}
		cert, _ := x509.ParseCertificate(der)
		pool := x509.NewCertPool()
		pool.AddCert(cert)
		ca = &testCA{pool: pool, cert: cert, key: key}
	})
	return ca
}

func (c *testCA) leaf(t testing.TB, names ...string) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// server is a local HTTP(S) server that counts the requests it sees.
type server struct {
	*httptest.Server
	hits atomic.Int64
	port string
}

func newServer(t testing.TB, tlsNames []string, h http.Handler) *server {
	s := &server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	if len(tlsNames) > 0 {
		s.TLS = &tls.Config{Certificates: []tls.Certificate{getCA(t).leaf(t, tlsNames...)}}
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	_, s.port, _ = net.SplitHostPort(s.Listener.Addr().String())
	return s
}

// fakeResolver maps test names to addresses and counts lookups; a name it
// does not know fails like NXDOMAIN. Its answers may include public
// addresses: those are only ever checked, never dialed.
type fakeResolver struct {
	mu      sync.Mutex
	names   map[string][]netip.Addr
	lookups map[string]int
}

func newResolver(kv ...string) *fakeResolver {
	r := &fakeResolver{names: map[string][]netip.Addr{}, lookups: map[string]int{}}
	for i := 0; i < len(kv); i += 2 {
		r.add(kv[i], kv[i+1])
	}
	return r
}

func (r *fakeResolver) add(name string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range addrs {
		r.names[name] = append(r.names[name], netip.MustParseAddr(a))
	}
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups[host]++
	if a, ok := r.names[host]; ok {
		return append([]netip.Addr(nil), a...), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *fakeResolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups[host]
}

func mustPolicy(t testing.TB, c netpolicy.Config) *netpolicy.Policy {
	t.Helper()
	p, err := netpolicy.NewPolicy(c)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

func testClient(r Resolver) *Client {
	return &Client{Resolver: r, RootCAs: getCA(nil).pool}
}

func fetchClient(r Resolver) testingClient { return testingClient{testClient(r)} }

// FetchRequest and PostRequest are what a test asks of a testingClient:
// a URL as an agent wrote it, made into the request the executor takes as
// the daemon makes it — parsed and authorized once (AuthorizeFetch,
// AuthorizePost), its host looked up once and every address of the
// answer classified (the decision's netpolicy.CheckAddrs) — unless Addr
// names the address decided on.
type FetchRequest struct {
	URL     string
	Method  string // GET when empty, as the fetch's args decoder makes it
	Headers map[string]string
	Addr    netip.AddrPort
	Creds   *Credentials // the tool's credential values, if any
}

type PostRequest struct {
	URL   string
	Body  []byte
	Addr  netip.AddrPort
	Creds *Credentials
}

// testingClient is a Client whose Fetch and Post take a FetchRequest and
// a PostRequest.
type testingClient struct{ *Client }

func (c testingClient) Fetch(ctx context.Context, p *netpolicy.Policy, req FetchRequest) (*Result, error) {
	method := req.Method
	if method == "" {
		method = "GET"
	}
	t, err := netpolicy.ParseURL(req.URL)
	if err != nil {
		return nil, err
	}
	r, err := p.AuthorizeFetch(t, method, req.Headers)
	if err != nil {
		return nil, err
	}
	addr, err := c.decide(ctx, p, t, req.Addr)
	if err != nil {
		return nil, err
	}
	return c.Client.FetchWith(ctx, p, r, addr, req.Creds)
}

func (c testingClient) Post(ctx context.Context, p *netpolicy.Policy, req PostRequest) (*Result, error) {
	t, err := netpolicy.ParseURL(req.URL)
	if err != nil {
		return nil, err
	}
	r, err := p.AuthorizePost(t)
	if err != nil {
		return nil, err
	}
	addr, err := c.decide(ctx, p, t, req.Addr)
	if err != nil {
		return nil, err
	}
	return c.Client.PostWith(ctx, p, r, addr, req.Body, req.Creds)
}

// decide is the daemon's one lookup of t's host and its decision on the
// answer: every address classified, the first the one to send to.
func (c testingClient) decide(ctx context.Context, p *netpolicy.Policy, t *netpolicy.Target, pinned netip.AddrPort) (netip.Addr, error) {
	if pinned.IsValid() {
		return pinned.Addr(), nil
	}
	addrs, err := c.Lookup(ctx, t)
	if err != nil {
		return netip.Addr{}, err
	}
	return netpolicy.CheckAddrs(addrs, p.InsecureAllowPrivate())
}

func hostPort(name, port string) string { return name + ":" + port }

func atoiPort(t testing.TB, s string) uint16 {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return uint16(n)
}

var _ = fmt.Sprintf
