//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/egress"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

const (
	credToken  = "sk-live-cred-7f3a9c1e5b2d4086"
	credValue  = "Bearer " + credToken
	credToken2 = "sk-live-cred-rotated-2c8e41d0"
)

// credServer is a loopback server standing in for an API that takes a
// credential: it keeps the Authorization header of every request, by
// path, and echoes it where asked.
type credServer struct {
	port int
	mu   sync.Mutex
	auth map[string][]string
}

func (s *credServer) saw(path string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth[path]...)
}

func newCredServer(t *testing.T, route func(s *credServer, w http.ResponseWriter, r *http.Request)) *credServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testutil.Must(t, err)
	s := &credServer{port: l.Addr().(*net.TCPAddr).Port, auth: map[string][]string{}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth[r.URL.Path] = append(s.auth[r.URL.Path], r.Header.Get("Authorization"))
		s.mu.Unlock()
		route(s, w, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return s
}

// writeSecret writes a credential file as an operator would: root's,
// 0600, in a directory of its own outside the workspace.
func writeSecret(t *testing.T, dir, value string) string {
	t.Helper()
	p := filepath.Join(dir, "api-token")
	testutil.Must(t, os.WriteFile(p+".tmp", []byte(value+"\n"), 0o600))
	testutil.Must(t, os.Rename(p+".tmp", p))
	return p
}

// credFixture: the API (credentials for localhost:PORT) and a second
// allowed host (127.0.0.1:PORT2), each redirecting to the other on
// request, and a fetch tool and a post tool naming the credential.
func credFixture(t *testing.T) (h *harness, up, other *credServer, secret string) {
	t.Helper()
	testutil.RequireRoot(t)
	var apiPort, otherPort int
	up = newCredServer(t, func(s *credServer, w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, fmt.Sprintf("http://127.0.0.1:%d/bounce", otherPort), http.StatusFound)
		case "/echo":
			w.Header().Set("Content-Type", "text/plain; x="+got)
			io.WriteString(w, "you sent "+got+" and the token alone is "+strings.TrimPrefix(got, "Bearer "))
		case "/split":
			// The echo in two writes, cut in the middle of the token.
			io.WriteString(w, "<"+got[:len(got)/2])
			w.(http.Flusher).Flush()
			io.WriteString(w, got[len(got)/2:]+">")
		case "/hooks/in":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"echo":"`+got+`"}`)
		default:
			io.WriteString(w, "ok "+r.URL.Path)
		}
	})
	apiPort = up.port
	other = newCredServer(t, func(s *credServer, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bounce" {
			http.Redirect(w, r, fmt.Sprintf("http://localhost:%d/back", apiPort), http.StatusFound)
			return
		}
		io.WriteString(w, "other "+r.URL.Path)
	})
	otherPort = other.port
	base := t.TempDir()
	testutil.Must(t, os.MkdirAll(filepath.Join(base, "notes"), 0o755))
	secret = writeSecret(t, t.TempDir(), credValue)
	m := writeManifest(t, base, fmt.Sprintf(`{"schema_version":1,"tools":{
	  "read_notes":{"operation":"read","roots":["notes"]},
	  "api_get":{"operation":"fetch","hosts":["localhost:%[1]d","127.0.0.1:%[2]d"],"schemes":["http"],
	    "insecure_allow_private":true,"allowed_headers":["Accept","Authorization"],"timeout_ms":5000,
	    "credentials":{"localhost:%[1]d":{"header":"Authorization","value_file":%[3]q}}},
	  "api_post":{"operation":"post","webhooks":["http://localhost:%[1]d/hooks/*"],"schemes":["http"],
	    "insecure_allow_private":true,
	    "credentials":{"localhost:%[1]d":{"header":"Authorization","value_file":%[3]q}}}}}`, up.port, other.port, secret))
	return start(t, m, securefs.ModeAuto), up, other, secret
}

// TestFetchCredential: sluiced adds the credential on every hop to its
// host (a redirect back to it too) and on no other; the agent's own
// Authorization for that host is invalid_args, for another host its own;
// a server's echo of the value, whole or split across two writes, comes
// back as [REDACTED:credential], in the body and the content type; and
// the value is nowhere in a result, the ledger, the status or the logs
// (docs/security.md, "Credentials the agent never holds").
func TestFetchCredential(t *testing.T) {
	h, up, other, _ := credFixture(t)
	apiURL := fmt.Sprintf("http://localhost:%d", up.port)
	otherURL := fmt.Sprintf("http://127.0.0.1:%d", other.port)
	var results [][]byte
	get := func(url string, headers map[string]string) *api.CallResult {
		t.Helper()
		args := map[string]any{"url": url}
		if headers != nil {
			args["headers"] = headers
		}
		res, raw := h.call("api_get", args)
		results = append(results, raw)
		return res
	}

	if res := get(apiURL+"/check", nil); !res.OK || *res.Output != "ok /check" {
		t.Fatalf("check: %+v", res)
	}
	if got := up.saw("/check"); len(got) != 1 || got[0] != credValue {
		t.Fatalf("the credential's host got Authorization %q", got)
	}
	// localhost -> 127.0.0.1 (another allowed host) -> back to localhost.
	if res := get(apiURL+"/away", nil); !res.OK || *res.Output != "ok /back" {
		t.Fatalf("redirects: %+v", res)
	}
	if got := other.saw("/bounce"); len(got) != 1 || got[0] != "" {
		t.Fatalf("the redirect to another host carried %q", got)
	}
	if got := up.saw("/back"); len(got) != 1 || got[0] != credValue {
		t.Fatalf("the redirect back to the credential's host carried %q", got)
	}

	// The agent's own Authorization: refused for the credential's host,
	// before anything is sent; its own for another host.
	res := get(apiURL+"/mine", map[string]string{"Authorization": "Bearer agent-own"})
	if res.Verdict != api.VerdictDeny || res.Reason != api.ReasonInvalidArgs || up.saw("/mine") != nil {
		t.Fatalf("agent Authorization for the credential's host: %+v, sent %q", res, up.saw("/mine"))
	}
	if res := get(otherURL+"/mine", map[string]string{"Authorization": "Bearer agent-own"}); !res.OK || other.saw("/mine")[0] != "Bearer agent-own" {
		t.Fatalf("agent Authorization for another host: %+v", res)
	}

	res = get(apiURL+"/echo", nil)
	want := "you sent " + egress.CredentialMark + " and the token alone is " + egress.CredentialMark
	if !res.OK || *res.Output != want || res.ContentType != "text/plain; x="+egress.CredentialMark {
		t.Fatalf("echo: %q, content type %q", *res.Output, res.ContentType)
	}
	// The echoes are counted as redactions (kind credential), in the
	// result and the ledger, even in a tool without redact.
	if res.Redacted != 3 {
		t.Errorf("echo: redacted %d, want 3 (two in the body, one in the content type)", res.Redacted)
	}
	if recs := ledgerRecords(t, h, audit.KindResult, func(r *audit.Record) bool {
		return r.CallID == res.CallID && r.Result != nil && r.Result.Redacted["credential"] == 3
	}); len(recs) != 1 {
		t.Errorf("the echo's result record does not count 3 credential redactions")
	}
	if res := get(apiURL+"/split", nil); !res.OK || *res.Output != "<"+egress.CredentialMark+">" {
		t.Fatalf("split echo: %q", *res.Output)
	}
	pr, raw := h.call("api_post", map[string]any{"url": apiURL + "/hooks/in", "body": map[string]any{"x": 1}})
	results = append(results, raw)
	if !pr.OK || *pr.Output != `{"echo":"`+egress.CredentialMark+`"}` || up.saw("/hooks/in")[0] != credValue {
		t.Fatalf("post: %+v, sent %q", pr, up.saw("/hooks/in"))
	}

	st, err := h.c.Status(context.Background())
	testutil.Must(t, err)
	status, _ := json.Marshal(st)
	for what, b := range map[string][]byte{
		"ledger": h.ledger(), "status": status, "logs": h.logs.Bytes(), "results": bytes.Join(results, nil),
	} {
		if bytes.Contains(b, []byte(credToken)) {
			t.Errorf("the credential is in the %s", what)
		}
	}
}

// TestCredentialFileRefused: a value_file is refused at load unless it is
// root's, 0600 or 0640, reached through nothing another uid could
// change, and beneath no tool's root; the error names the key and never
// the value.
func TestCredentialFileRefused(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	testutil.Must(t, os.MkdirAll(filepath.Join(base, "notes"), 0o755))
	load := func(valueFile, extraTool string) error {
		t.Helper()
		m := writeManifest(t, base, fmt.Sprintf(`{"schema_version":1,"tools":{%s
		  "get":{"operation":"fetch","hosts":["api.example.com"],
		    "credentials":{"api.example.com":{"header":"Authorization","value_file":%q}}}}}`, extraTool, valueFile))
		p, err := loadPolicy(m, securefs.ModeAuto, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err == nil {
			p.close()
		}
		return err
	}
	secrets := t.TempDir()
	good := writeSecret(t, secrets, credValue)
	if err := load(good, ""); err != nil {
		t.Fatalf("a 0600 root file: %v", err)
	}
	testutil.Must(t, os.Chmod(good, 0o640))
	if err := load(good, ""); err != nil {
		t.Fatalf("a 0640 root file: %v", err)
	}

	// Each case builds its file, and says what the error must name.
	dir := func() string { return t.TempDir() }
	for _, c := range []struct {
		name  string
		make  func() string
		extra string
		want  string
	}{
		{"mode 0666", func() string { p := writeSecret(t, dir(), credValue); os.Chmod(p, 0o666); return p }, "", "mode 0666"},
		{"mode 0644", func() string { p := writeSecret(t, dir(), credValue); os.Chmod(p, 0o644); return p }, "", "mode 0644"},
		{"mode 0700", func() string { p := writeSecret(t, dir(), credValue); os.Chmod(p, 0o700); return p }, "", "mode 0700"},
		{"owned by uid 1000", func() string { p := writeSecret(t, dir(), credValue); os.Chown(p, 1000, 1000); return p }, "", "owned by uid 1000"},
		{"a directory of uid 1000", func() string {
			d := filepath.Join(dir(), "sub")
			testutil.Must(t, os.Mkdir(d, 0o755))
			p := writeSecret(t, d, credValue)
			testutil.Must(t, os.Chown(d, 1000, 1000))
			return p
		}, "", "owned by uid 1000"},
		{"a world-writable directory", func() string {
			d := filepath.Join(dir(), "open")
			testutil.Must(t, os.Mkdir(d, 0o755))
			testutil.Must(t, os.Chmod(d, 0o777))
			return writeSecret(t, d, credValue)
		}, "", "world-writable"},
		{"a symlink of uid 1000", func() string {
			l := filepath.Join(dir(), "link")
			testutil.Must(t, os.Symlink(good, l))
			testutil.Must(t, os.Lchown(l, 1000, 1000))
			return l
		}, "", "owned by uid 1000"},
		{"a directory", func() string { return dir() }, "", "is a directory"},
		{"missing", func() string { return filepath.Join(dir(), "nope") }, "", "no such file"},
		{"too short", func() string { return writeSecret(t, dir(), "Bearer x") }, "", "secret part must be"},
		{"a control byte", func() string { return writeSecret(t, dir(), credValue+"\x01") }, "", "control byte"},
		{"beneath a read root", func() string { return writeSecret(t, filepath.Join(base, "notes"), credValue) },
			`"notes":{"operation":"read","roots":["notes"]},`, "the agent could read the credential"},
		{"beneath a write root", func() string { return writeSecret(t, filepath.Join(base, "notes"), credValue) },
			`"put":{"operation":"write","roots":["notes"]},`, "credential file of tools.get.credentials.api.example.com"},
		// A command's mounts are views a container reads: one that can
		// reach the file is refused as a root is, whichever tool loads first.
		{"beneath a command's mount", func() string { return writeSecret(t, filepath.Join(base, "notes"), credValue) },
			`"run":{"operation":"execute","commands":[["cat","/x"]],"mounts":["notes"],"pool":0},`, "a command could read the credential"},
		{"a command's mount of its directory's parent", func() string { return writeSecret(t, filepath.Join(base, "notes"), credValue) },
			`"run":{"operation":"execute","commands":[["cat","/x"]],"mounts":["."],"pool":0},`, "a command could read the credential"},
		{"a command's file mount of it", func() string { return writeSecret(t, filepath.Join(base, "notes"), credValue) },
			`"run":{"operation":"execute","commands":[["cat","/x"]],"mounts":["notes/api-token"],"pool":0},`, "a command could read the credential"},
	} {
		err := load(c.make(), c.extra)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "tools.") {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), credToken) {
			t.Errorf("%s: the error quotes the value: %v", c.name, err)
		}
	}
}

// TestCredentialReload: a reload reads the value file again, so a
// rotated credential is sent from the next call on; a reload that finds
// the file unsafe fails and keeps the loaded value.
func TestCredentialReload(t *testing.T) {
	h, up, _, secret := credFixture(t)
	url := fmt.Sprintf("http://localhost:%d/check", up.port)
	fetch := func() {
		t.Helper()
		if res, _ := h.call("api_get", map[string]any{"url": url}); !res.OK {
			t.Fatalf("fetch: %+v", res)
		}
	}
	fetch()
	writeSecret(t, filepath.Dir(secret), "Bearer "+credToken2)
	ctx := context.Background()
	if _, err := h.c.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	fetch()
	testutil.Must(t, os.Chmod(secret, 0o666))
	if _, err := h.c.Reload(ctx); err == nil || !strings.Contains(err.Error(), "mode 0666") {
		t.Fatalf("reload with a 0666 file: %v", err)
	}
	fetch()
	if got := up.saw("/check"); len(got) != 3 || got[0] != credValue || got[1] != "Bearer "+credToken2 || got[2] != got[1] {
		t.Fatalf("sent %q", got)
	}
	if bytes.Contains(h.logs.Bytes(), []byte(credToken2)) || bytes.Contains(h.ledger(), []byte(credToken2)) {
		t.Fatal("the rotated value is in the logs or the ledger")
	}
}
