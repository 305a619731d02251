package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/egress/netpolicy"
)

const (
	testToken = "sk-test-0123456789abcdef"
	testValue = "Bearer " + testToken
)

// seen records what each server was sent in one header, by path.
type seen struct {
	mu  sync.Mutex
	got map[string][]string
}

func (s *seen) note(r *http.Request, header string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.got == nil {
		s.got = map[string][]string{}
	}
	s.got[r.URL.Path] = append(s.got[r.URL.Path], r.Header.Get(header))
}

func (s *seen) of(path string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[path]
}

func mustCreds(t *testing.T, values map[string]string) *Credentials {
	t.Helper()
	c, err := NewCredentials(values)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCredentialEveryHopToItsHost: the header is added on the request to
// the credential's host, on a redirect back to it, and never on a
// redirect to another allowed host, whether another name or the same
// name at another port (docs/egress.md, "Credentials").
func TestCredentialEveryHopToItsHost(t *testing.T) {
	var api, other, otherPort seen
	var apiSrv, otherSrv, portSrv *server
	apiSrv = newServer(t, []string{"api.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.note(r, "Authorization")
		switch r.URL.Path {
		case "/start":
			http.Redirect(w, r, "https://other.test:"+otherSrv.port+"/bounce", http.StatusFound)
		case "/port":
			http.Redirect(w, r, "https://api.test:"+portSrv.port+"/there", http.StatusFound)
		default:
			io.WriteString(w, "api "+r.URL.Path)
		}
	}))
	otherSrv = newServer(t, []string{"other.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.note(r, "Authorization")
		http.Redirect(w, r, "https://api.test:"+apiSrv.port+"/end", http.StatusFound)
	}))
	portSrv = newServer(t, []string{"api.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherPort.note(r, "Authorization")
		io.WriteString(w, "port "+r.URL.Path)
	}))
	res := newResolver("api.test", "127.0.0.1", "other.test", "127.0.0.1")
	p := mustPolicy(t, netpolicy.Config{
		Hosts:                []string{"api.test:" + apiSrv.port, "other.test:" + otherSrv.port, "api.test:" + portSrv.port},
		InsecureAllowPrivate: true, MaxRedirects: 5,
		Credentials: map[string]string{"api.test:" + apiSrv.port: "authorization"},
	})
	creds := mustCreds(t, map[string]string{"api.test:" + apiSrv.port: testValue})
	c := fetchClient(res)

	r, err := c.Fetch(context.Background(), p, FetchRequest{URL: "https://api.test:" + apiSrv.port + "/start", Creds: creds})
	if err != nil || string(r.Body) != "api /end" || len(r.Hops) != 3 {
		t.Fatalf("chain: %+v %v", r, err)
	}
	if got := api.of("/start"); len(got) != 1 || got[0] != testValue {
		t.Fatalf("first hop to the credential's host carried %q", got)
	}
	if got := other.of("/bounce"); len(got) != 1 || got[0] != "" {
		t.Fatalf("redirect to another host carried %q", got)
	}
	if got := api.of("/end"); len(got) != 1 || got[0] != testValue {
		t.Fatalf("redirect back to the credential's host carried %q", got)
	}
	// The same name at another port is another host.
	if _, err := c.Fetch(context.Background(), p, FetchRequest{URL: "https://api.test:" + apiSrv.port + "/port", Creds: creds}); err != nil {
		t.Fatal(err)
	}
	if got := otherPort.of("/there"); len(got) != 1 || got[0] != "" {
		t.Fatalf("redirect to the same name at another port carried %q", got)
	}
	// Without the values (a caller that did not load them), a request to
	// the credential's host is refused, never sent bare.
	hits := apiSrv.hits.Load()
	if _, err := c.Fetch(context.Background(), p, FetchRequest{URL: "https://api.test:" + apiSrv.port + "/x"}); !errors.Is(err, netpolicy.ErrEgressDenied) {
		t.Fatalf("no values: %v", err)
	}
	if apiSrv.hits.Load() != hits {
		t.Fatal("a request went to the credential's host without its credential")
	}
}

// TestCredentialAgentHeaderRefused: an agent-supplied header of the
// credential's name for its host is invalid_args before anything is
// sent; for another host it is the agent's own header, as before.
func TestCredentialAgentHeaderRefused(t *testing.T) {
	p := mustPolicy(t, netpolicy.Config{
		Hosts: []string{"api.test", "other.test"}, AllowedHeaders: []string{"Accept", "Authorization", "X-Api-Key"},
		Credentials: map[string]string{"api.test": "X-Api-Key"},
	})
	for _, c := range []struct {
		url     string
		headers map[string]string
		refused bool
	}{
		{"https://api.test/", map[string]string{"x-api-key": "mine"}, true},
		{"https://api.test/", map[string]string{"X-API-KEY": "mine"}, true},
		{"https://api.test/", map[string]string{"Authorization": "Bearer mine"}, false},
		{"https://other.test/", map[string]string{"X-Api-Key": "mine"}, false},
	} {
		tg, err := netpolicy.ParseURL(c.url)
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.AuthorizeFetch(tg, "GET", c.headers)
		if refused := err != nil; refused != c.refused || (refused && (!errors.Is(err, netpolicy.ErrInvalidRequest) || reasonOf(err) != api.ReasonInvalidArgs)) {
			t.Errorf("%s %v: %v", c.url, c.headers, err)
		}
	}
	// TRACE (or any method but GET and HEAD) stays refused for fetch.
	tg, _ := netpolicy.ParseURL("https://api.test/")
	for _, m := range []string{"TRACE", "TRACK", "OPTIONS", "POST"} {
		if _, err := p.AuthorizeFetch(tg, m, nil); !errors.Is(err, netpolicy.ErrInvalidRequest) {
			t.Errorf("%s: %v", m, err)
		}
	}
}

// TestCredentialEchoScrubbed: a server that echoes the value (in its
// body, split across two writes at every offset, in its Content-Type,
// in a malformed header whose text the error quotes, and in a Location)
// gives the agent CredentialMark in its place, everywhere.
func TestCredentialEchoScrubbed(t *testing.T) {
	var otherSrv *server
	apiSrv := newServer(t, []string{"api.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		switch r.URL.Path {
		case "/headers":
			w.Header().Set("Content-Type", "text/plain; echo="+got)
			io.WriteString(w, "you sent: "+got+"\ntoken alone: "+strings.TrimPrefix(got, "Bearer ")+"\n")
		case "/split":
			k := len(r.URL.Query().Get("k"))
			io.WriteString(w, "[")
			io.WriteString(w, got[:k])
			w.(http.Flusher).Flush()
			io.WriteString(w, got[k:])
			io.WriteString(w, "]")
		case "/malformed":
			conn, buf, _ := w.(http.Hijacker).Hijack()
			buf.WriteString("HTTP/1.1 200 OK\r\nBroken header " + got + "\r\n\r\n")
			buf.Flush()
			conn.Close()
		case "/location":
			http.Redirect(w, r, "https://other.test:"+otherSrv.port+"/?t="+got, http.StatusFound)
		case "/prefix":
			io.WriteString(w, "x"+got[:len(got)-1])
		}
	}))
	otherSrv = newServer(t, []string{"other.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	res := newResolver("api.test", "127.0.0.1", "other.test", "127.0.0.1")
	p := mustPolicy(t, netpolicy.Config{
		Hosts:                []string{"api.test:" + apiSrv.port, "other.test:" + otherSrv.port},
		InsecureAllowPrivate: true,
		Credentials:          map[string]string{"api.test:" + apiSrv.port: "Authorization"},
	})
	creds := mustCreds(t, map[string]string{"api.test:" + apiSrv.port: testValue})
	c := fetchClient(res)
	base := "https://api.test:" + apiSrv.port
	fetch := func(path string) (*Result, error) {
		return c.Fetch(context.Background(), p, FetchRequest{URL: base + path, Creds: creds})
	}

	r, err := fetch("/headers")
	if err != nil {
		t.Fatal(err)
	}
	want := "you sent: " + CredentialMark + "\ntoken alone: " + CredentialMark + "\n"
	if string(r.Body) != want || r.ContentType != "text/plain; echo="+CredentialMark || r.Redacted != 3 {
		t.Fatalf("body %q content type %q redacted %d", r.Body, r.ContentType, r.Redacted)
	}
	for k := 0; k <= len(testValue); k++ {
		r, err := fetch("/split?k=" + strings.Repeat("x", k))
		if err != nil || string(r.Body) != "["+CredentialMark+"]" {
			t.Fatalf("split at %d: %q %v", k, r.Body, err)
		}
	}
	// A value cut short is not the value: what was sent comes back.
	if r, err := fetch("/prefix"); err != nil || string(r.Body) != "x"+testValue[:len(testValue)-1] {
		t.Fatalf("prefix: %q %v", r.Body, err)
	}
	_, err = fetch("/malformed")
	if err == nil || strings.Contains(err.Error(), testToken) || !strings.Contains(err.Error(), CredentialMark) || reasonOf(err) != api.ReasonUpstreamError {
		t.Fatalf("malformed: %v (reason %s)", err, reasonOf(err))
	}
	r, err = fetch("/location")
	if !errors.Is(err, netpolicy.ErrEgressDenied) || otherSrv.hits.Load() != 0 {
		t.Fatalf("a Location carrying the value: %v, other saw %d", err, otherSrv.hits.Load())
	}
	for _, h := range r.Hops {
		if strings.Contains(h.URL, testToken) || strings.Contains(h.URL, strings.ReplaceAll(testValue, " ", "+")) {
			t.Fatalf("hop URL %q holds the value", h.URL)
		}
	}
}

// TestCredentialPost: a post to the credential's webhook host carries
// the header, and an echo is scrubbed; a webhook on another host gets
// none.
func TestCredentialPost(t *testing.T) {
	var hook seen
	srv := newServer(t, []string{"hooks.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hook.note(r, "X-Hook-Token")
		io.WriteString(w, `{"echo":"`+r.Header.Get("X-Hook-Token")+`"}`)
	}))
	other := newServer(t, []string{"other.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hook.note(r, "X-Hook-Token")
	}))
	p := mustPolicy(t, netpolicy.Config{
		Webhooks:             []string{"https://hooks.test:" + srv.port + "/in/*", "https://other.test:" + other.port + "/in/*"},
		InsecureAllowPrivate: true,
		Credentials:          map[string]string{"hooks.test:" + srv.port: "X-Hook-Token"},
	})
	creds := mustCreds(t, map[string]string{"hooks.test:" + srv.port: testToken})
	c := fetchClient(newResolver("hooks.test", "127.0.0.1", "other.test", "127.0.0.1"))
	r, err := c.Post(context.Background(), p, PostRequest{URL: "https://hooks.test:" + srv.port + "/in/a", Body: []byte(`{}`), Creds: creds})
	if err != nil || string(r.Body) != `{"echo":"`+CredentialMark+`"}` {
		t.Fatalf("post: %q %v", r.Body, err)
	}
	if _, err := c.Post(context.Background(), p, PostRequest{URL: "https://other.test:" + other.port + "/in/b", Body: []byte(`{}`), Creds: creds}); err != nil {
		t.Fatal(err)
	}
	if got := hook.of("/in/a"); len(got) != 1 || got[0] != testToken {
		t.Fatalf("webhook host got %q", got)
	}
	if got := hook.of("/in/b"); len(got) != 1 || got[0] != "" {
		t.Fatalf("another webhook host got %q", got)
	}
}

// TestNewCredentials: a value that is no header value, or too short to
// tell from text, is refused, and the error never quotes it.
func TestNewCredentials(t *testing.T) {
	for _, v := range []string{"", "short", "Bearer short", "tok\r\nX-Evil: 1" + testToken, "tok\x00" + testToken, " " + testToken, testToken + "\n",
		strings.Repeat("a", MaxCredentialBytes+1)} {
		_, err := NewCredentials(map[string]string{"api.test": v})
		if err == nil || !strings.Contains(err.Error(), "api.test") {
			t.Errorf("%q: %v", v, err)
			continue
		}
		if len(v) >= 4 && strings.Contains(err.Error(), strings.TrimSpace(v)) {
			t.Errorf("the error quotes the value: %v", err)
		}
	}
	c := mustCreds(t, map[string]string{"api.test": testValue})
	for _, s := range []string{c.String(), c.GoString()} {
		if strings.Contains(s, testToken) {
			t.Fatalf("%q", s)
		}
	}
}

// chunkReader returns its data in the chunks given, one per Read.
type chunkReader struct{ chunks []string }

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	if r.chunks[0] = r.chunks[0][n:]; r.chunks[0] == "" {
		r.chunks = r.chunks[1:]
	}
	return n, nil
}

// TestScrubReader: every needle is replaced however the stream is cut:
// at every split point of two reads, one byte at a time; overlapping and
// adjacent needles; a partial needle at the end comes back as sent.
func TestScrubReader(t *testing.T) {
	s := newScrubber([]string{"Bearer " + testToken, testToken, "aaab"})
	m := CredentialMark
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"no secret here", "no secret here"},
		{"Bearer " + testToken, m},
		{testToken + testToken, m + m},
		{"x" + testToken + "y", "x" + m + "y"},
		{"Bearer Bearer " + testToken, "Bearer " + m},
		{"aaaab", "a" + m},
		{"aaa", "aaa"},
		{testToken[:10], testToken[:10]},
		{"Bearer " + testToken[:5], "Bearer " + testToken[:5]},
	} {
		readers := map[string]func() io.Reader{
			"whole":    func() io.Reader { return strings.NewReader(c.in) },
			"one byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(c.in)) },
		}
		for k := 0; k <= len(c.in); k++ {
			in, k := c.in, k
			readers["split at "+strconv.Itoa(k)] = func() io.Reader {
				return &chunkReader{chunks: []string{in[:k], in[k:]}}
			}
		}
		for name, mk := range readers {
			var n int
			got, err := io.ReadAll(s.reader(io.NopCloser(mk()), &n))
			if err != nil || string(got) != c.want {
				t.Errorf("%q (%s): got %q %v, want %q", c.in, name, got, err, c.want)
			}
		}
		if got, _ := s.String(c.in); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	// A stream cut short by an error returns nothing it held back.
	z := s.reader(io.NopCloser(io.MultiReader(strings.NewReader("ok "+testToken[:5]), iotest.ErrReader(io.ErrUnexpectedEOF))), new(int))
	got, err := io.ReadAll(z)
	if !errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(string(got), testToken[:5]) {
		t.Fatalf("cut short: %q %v", got, err)
	}
	// Large streams stay a read buffer and a tail: many replacements in
	// a body much larger than one read.
	big := strings.Repeat("0123456789"+testToken, 10000)
	var n int
	out, err := io.ReadAll(bufio.NewReaderSize(s.reader(io.NopCloser(strings.NewReader(big)), &n), 4096))
	if err != nil || n != 10000 || string(out) != strings.Repeat("0123456789"+m, 10000) {
		t.Fatalf("big: n %d err %v", n, err)
	}
}
