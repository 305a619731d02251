package mcp_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// TestMCPFetchAndNotify: fetch and post tools through the bridge, against
// a local server standing in for the internet: both are openWorld (fetch
// read-only), a fetch returns the body as text with its status in
// structuredContent, a post reaches the webhook, and a post to an
// undeclared URL is a tool error carrying egress_denied.
func TestMCPFetchAndNotify(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var posted []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			posted = append(posted, string(b))
			mu.Unlock()
			w.WriteHeader(http.StatusAccepted)
			return
		}
		io.WriteString(w, "status: green\n")
	})}
	go srv.Serve(l)
	defer srv.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, m := fixture(t, fmt.Sprintf(`,
	  "http_fetch":{"operation":"fetch","hosts":["localhost:%[1]d"],"schemes":["http"],"insecure_allow_private":true},
	  "notify":{"operation":"post","webhooks":["http://localhost:%[1]d/hooks/*"],"schemes":["http"],"insecure_allow_private":true}`, port))
	d := startSluiced(t, m)
	s := connect(t, d.socket, clientAs(d.socket, agentUID), "")

	lt, err := s.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range lt.Tools {
		a := tl.Annotations
		switch tl.Name {
		case "http_fetch":
			if a == nil || a.OpenWorldHint == nil || !*a.OpenWorldHint || !a.ReadOnlyHint {
				t.Errorf("http_fetch annotations: %+v", a)
			}
		case "notify":
			if a == nil || a.OpenWorldHint == nil || !*a.OpenWorldHint || a.ReadOnlyHint || a.DestructiveHint == nil || *a.DestructiveHint {
				t.Errorf("notify annotations: %+v", a)
			}
		}
	}

	res := s.mustCall(t, "http_fetch", map[string]any{"url": fmt.Sprintf("http://localhost:%d/status", port)})
	if st := structured(t, res); res.IsError || st.HTTPStatus != 200 || !strings.Contains(texts(res), "status: green") {
		t.Errorf("fetch: %+v %q", st, texts(res))
	}
	res = s.mustCall(t, "notify", map[string]any{"url": fmt.Sprintf("http://localhost:%d/hooks/ci", port), "body": map[string]string{"text": "done"}})
	if st := structured(t, res); res.IsError || st.HTTPStatus != 202 {
		t.Errorf("notify: %+v %q", st, texts(res))
	}
	res = s.mustCall(t, "notify", map[string]any{"url": fmt.Sprintf("http://localhost:%d/elsewhere", port), "body": "x"})
	if st := structured(t, res); !res.IsError || st.Reason != api.ReasonEgressDenied {
		t.Errorf("notify elsewhere: %+v %q", st, texts(res))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posted) != 1 || posted[0] != `{"text":"done"}` {
		t.Errorf("the webhook got %q", posted)
	}
}
