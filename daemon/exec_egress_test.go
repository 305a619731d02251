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
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
)

// upstream is a local HTTP server standing in for the internet: it
// records the paths it was asked for.
type upstream struct {
	mu    sync.Mutex
	paths []string
	port  string
}

func (u *upstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.paths...)
}

// startUpstream listens on the address "localhost" resolves to first,
// which is what the proxy (on the host) dials for a hosts entry
// "localhost:PORT".
func startUpstream(t *testing.T, also ...func(mux *http.ServeMux)) *upstream {
	t.Helper()
	addrs, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", "localhost")
	if err != nil || len(addrs) == 0 {
		t.Fatalf("resolve localhost: %v %v", addrs, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(addrs[0].Unmap().String(), "0"))
	testutil.Must(t, err)
	u := &upstream{port: fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from upstream %s\n", r.URL.Path)
	})
	for _, f := range also {
		f(mux)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.paths = append(u.paths, r.URL.Path)
		u.mu.Unlock()
		mux.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return u
}

const pyFetch = `
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=20)
    print('STATUS', r.status, r.read().decode().strip())
except urllib.error.HTTPError as e:
    print('STATUS', e.code)
`

const pyRaw = `
import socket, sys
s = socket.socket()
s.settimeout(5)
try:
    s.connect(('127.0.0.1', int(sys.argv[1])))
    s.sendall(b'GET /raw HTTP/1.0\r\n\r\n')
    print('RAW connected', s.recv(100))
except OSError as e:
    print('RAW failed', e.errno)
`

const pyNet = `
import fcntl, os, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack('16sH', fcntl.ioctl(s, 0x8913, struct.pack('16sH', b'lo', 0))[:18])[1]
print('LO_UP', flags & 1)
print('PROXYVARS', sorted(k for k in os.environ if k.lower().endswith('_proxy')))
c = socket.socket()
try:
    c.connect(('127.0.0.1', 3128))
    print('PROXY connected')
except OSError as e:
    print('PROXY failed', e.errno)
`

// TestExecEgress: an execute tool with egress reaches an allowed host
// through sluiced's proxy (curl, CONNECT and plain HTTP; python urllib,
// pooled and cold), gets 403 for any other host, cannot bypass the proxy
// with a raw socket, and every connection is a record under the call
// that made it. A tool without egress has no loopback and no proxy
// variables.
func TestExecEgress(t *testing.T) {
	testutil.RequireRoot(t)
	up := startUpstream(t)
	allowed := "localhost:" + up.port
	eg := `"egress":{"hosts":["` + allowed + `"],"schemes":["http"],"insecure_allow_private":true}`
	curl, err := os.Stat("/usr/bin/curl")
	haveCurl := err == nil && curl.Mode().IsRegular()
	tools := map[string]string{
		"curl_plain":   `"commands":[["curl","-sS","http://` + allowed + `/curl-plain"]],"pool":0,` + eg,
		"curl_connect": `"commands":[["curl","-sS","-p","http://` + allowed + `/curl-connect"]],"pool":0,` + eg,
		"curl_denied":  `"commands":[["curl","-sS","-o","/dev/null","-w","%{http_code}","http://other.example:` + up.port + `/denied"]],"pool":0,` + eg,
		"py":           `"commands":[["python3","-c",` + mustString(pyFetch) + `,"http://` + allowed + `/py"]],"pool":1,` + eg,
		"py_denied":    `"commands":[["python3","-c",` + mustString(pyFetch) + `,"http://127.0.0.1:` + up.port + `/literal"]],"pool":0,` + eg,
		"raw":          `"commands":[["python3","-c",` + mustString(pyRaw) + `,"` + up.port + `"]],"pool":0,` + eg,
		"net_egress":   `"commands":[["python3","-c",` + mustString(pyNet) + `]],"pool":0,` + eg,
		"net_none":     `"commands":[["python3","-c",` + mustString(pyNet) + `]],"pool":0`,
	}
	var b strings.Builder
	b.WriteString(`{"schema_version":1,"tools":{`)
	first := true
	for name, body := range tools {
		if !first {
			b.WriteString(",")
		}
		first = false
		fmt.Fprintf(&b, `"%s":{"operation":"execute",%s}`, name, body)
	}
	b.WriteString(`}}`)
	dir := t.TempDir()
	runDir := t.TempDir()
	t.Cleanup(func() {
		if left := sandbox.Leftovers(runDir); len(left) > 0 {
			t.Errorf("left behind after the daemon stopped: %v", left)
		}
	})
	h := start(t, writeManifest(t, dir, b.String()), securefs.ModeAuto, func(c *Config) { c.RunDir = runDir })

	calls := map[string][]string{} // tool -> call ids
	run := func(tool string) string {
		t.Helper()
		res, body := h.call(tool, map[string]any{})
		if res.Verdict != api.VerdictAllow || res.Reason != api.ReasonAllowed {
			t.Fatalf("%s: %s", tool, body)
		}
		calls[tool] = append(calls[tool], res.CallID)
		out := ""
		if res.Output != nil {
			out = *res.Output
		}
		t.Logf("%s: exit %v\n%s%s", tool, *res.ExitCode, out, res.Stderr)
		return out + res.Stderr
	}

	if haveCurl {
		if out := run("curl_plain"); !strings.Contains(out, "hello from upstream /curl-plain") {
			t.Errorf("curl (plain HTTP through the proxy): %q", out)
		}
		if out := run("curl_connect"); !strings.Contains(out, "hello from upstream /curl-connect") {
			t.Errorf("curl -p (CONNECT through the proxy): %q", out)
		}
		if out := run("curl_denied"); !strings.Contains(out, "403") {
			t.Errorf("curl to another host: %q, want 403", out)
		}
	} else {
		t.Log("SKIPPED the curl cases: this host has no /usr/bin/curl to bind into containers")
	}
	for i := range 2 { // the pooled box, then its refill (or a cold one)
		if out := run("py"); !strings.Contains(out, "STATUS 200 hello from upstream /py") {
			t.Errorf("python urllib #%d: %q", i, out)
		}
	}
	if out := run("py_denied"); !strings.Contains(out, "STATUS 403") {
		t.Errorf("python urllib to an unlisted IP literal: %q, want 403", out)
	}
	if out := run("raw"); !strings.Contains(out, "RAW failed") {
		t.Errorf("raw socket to the upstream's port: %q, want a failure", out)
	}
	if out := run("net_egress"); !strings.Contains(out, "LO_UP 1") || !strings.Contains(out, "PROXY connected") ||
		!strings.Contains(out, "PROXYVARS ['HTTPS_PROXY', 'HTTP_PROXY', 'http_proxy', 'https_proxy']") {
		t.Errorf("with egress: %q", out)
	}
	if out := run("net_none"); !strings.Contains(out, "LO_UP 0") || !strings.Contains(out, "PROXYVARS []") ||
		!strings.Contains(out, "PROXY failed 101") {
		t.Errorf("without egress: %q, want lo down, no proxy variables, no proxy", out)
	}

	// The upstream saw exactly the allowed requests: nothing denied, no raw socket.
	want := []string{"/py", "/py"}
	if haveCurl {
		want = []string{"/curl-plain", "/curl-connect", "/py", "/py"}
	}
	if got := up.seen(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("upstream saw %v, want %v", got, want)
	}

	// Each connection is a record under the call that made it.
	byCall := map[string][]audit.Record{}
	toolOf := map[string]string{}
	for tool, ids := range calls {
		for _, id := range ids {
			toolOf[id] = tool
		}
	}
	resultSeq := map[string]uint64{}
	for _, line := range bytes.Split(bytes.TrimSpace(h.ledger()), []byte("\n")) {
		var rec audit.Record
		testutil.Must(t, json.Unmarshal(line, &rec))
		if rec.Kind == audit.KindResult {
			resultSeq[rec.CallID] = rec.Seq
		}
		if rec.Kind != audit.KindConnection {
			continue
		}
		if _, done := resultSeq[rec.CallID]; done {
			t.Errorf("connection record after its call's result: %s", line)
		}
		tool, ok := toolOf[rec.CallID]
		if !ok || rec.Tool != tool || rec.Egress == nil || rec.Principal == nil || rec.Result == nil {
			t.Errorf("connection record not under a call of its tool: %s", line)
			continue
		}
		byCall[rec.CallID] = append(byCall[rec.CallID], rec)
	}
	check := func(tool string, reason api.Reason, method string) {
		t.Helper()
		for _, id := range calls[tool] {
			recs := byCall[id]
			if len(recs) != 1 {
				t.Errorf("%s (call %s): %d connection records, want 1: %+v", tool, id, len(recs), recs)
				continue
			}
			r := recs[0]
			if r.Reason != reason || r.Egress.Method != method {
				t.Errorf("%s: record %s/%s %s, want %s %s", tool, r.Verdict, r.Reason, r.Egress.Method, reason, method)
			}
			if reason == api.ReasonAllowed {
				if r.Verdict != api.VerdictAllow || r.Egress.Addr == "" || r.Egress.BytesIn == 0 || r.Egress.BytesOut == 0 ||
					r.Rule != "tools."+tool+".egress.hosts[0]" {
					t.Errorf("%s: allowed connection record: %+v %+v", tool, r, *r.Egress)
				}
			} else if r.Verdict != api.VerdictDeny || r.Egress.Addr != "" {
				t.Errorf("%s: refused connection record: %+v %+v", tool, r, *r.Egress)
			}
		}
	}
	if haveCurl {
		check("curl_plain", api.ReasonAllowed, "GET")
		check("curl_connect", api.ReasonAllowed, "CONNECT")
		check("curl_denied", "egress_denied", "GET")
	}
	check("py", api.ReasonAllowed, "GET")
	check("py_denied", "egress_denied", "GET")
	for _, tool := range []string{"raw", "net_none"} {
		for _, id := range calls[tool] {
			if n := len(byCall[id]); n != 0 {
				t.Errorf("%s: %d connection records, want none", tool, n)
			}
		}
	}
}

// TestExecEgressManifestErrors: the daemon builds the egress policy at
// load, and a bad entry names its key.
func TestExecEgressManifestErrors(t *testing.T) {
	testutil.RequireRoot(t)
	for _, c := range []struct{ egress, key string }{
		{`{"hosts":["Example.com"]}`, "tools.t.egress.hosts[0]"},
		{`{"hosts":["example.com"],"schemes":["ftp"]}`, "tools.t.egress.schemes[0]"},
		{`{"hosts":["*.com"]}`, "tools.t.egress.hosts[0]"},
	} {
		dir := t.TempDir()
		m := writeManifest(t, dir, `{"schema_version":1,"tools":{"t":{"operation":"execute","commands":[["true"]],"pool":0,"egress":`+c.egress+`}}}`)
		cfg := Config{Manifest: m, Socket: filepath.Join(dir, "s.sock"), StateDir: filepath.Join(dir, "state"),
			RunDir: filepath.Join(dir, "run"), Helper: testutil.Helper(t), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		err := Run(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s: %v, want an error naming %s", c.egress, err, c.key)
		}
	}
}

// pyJunkLines opens argv[1] connections to the proxy, one after another,
// each sending one malformed request line of 32,000 bytes with a key in
// it, then makes three allowed requests to argv[2] (host:port), and
// prints what it did.
const pyJunkLines = `
import socket, sys
n, allowed = int(sys.argv[1]), sys.argv[2]
line = b'GET http://x.example/?key=SECRET123' + b'x' * 32000 + b'\r\n\r\n'
sent = 0
for i in range(n):
    c = socket.create_connection(('127.0.0.1', 3128))
    try:
        c.sendall(line)
        sent += 1
        while c.recv(4096):
            pass
    except OSError:
        pass
    c.close()
ok = 0
for i in range(3):
    c = socket.create_connection(('127.0.0.1', 3128))
    c.sendall(('GET http://%s/after?api_key=SECRET123 HTTP/1.0\r\n\r\n' % allowed).encode())
    reply = b''
    while True:
        b = c.recv(4096)
        if not b:
            break
        reply += b
    c.close()
    if b'hello from upstream /after' in reply:
        ok += 1
print('LINES', sent, 'ALLOWED', ok)
`

// TestExecEgressAuditBounded: a command cannot fill the ledger through its
// proxy (docs/security.md, "The third review"). Each malformed request
// line, up to the 32 KiB header cap, was copied into its connection
// record's detail: one 20 s call wrote 49 MB. Now every record is bounded,
// a call's connection records stop at its audit budget (refused ones at
// half of it, so the junk does not crowd out the allowed connections that
// follow), and one dropped record counts what was not recorded. No query
// value reaches the ledger.
func TestExecEgressAuditBounded(t *testing.T) {
	testutil.RequireRoot(t)
	const n, budget = 300, 64 << 10
	up := startUpstream(t)
	allowed := "localhost:" + up.port
	eg := `"egress":{"hosts":["` + allowed + `"],"schemes":["http"],"insecure_allow_private":true}`
	m := `{"schema_version":1,"tools":{"junk":{"operation":"execute","pool":0,"timeout_ms":120000,` +
		`"commands":[["python3","-c",` + mustString(pyJunkLines) + `,"` + strconv.Itoa(n) + `","` + allowed + `"]],` + eg + `}}}`
	h := start(t, writeManifest(t, t.TempDir(), m), securefs.ModeAuto, func(c *Config) { c.EgressAuditBytes = budget })
	res, body := h.call("junk", map[string]any{})
	if res.Verdict != api.VerdictAllow || res.Output == nil || !strings.Contains(*res.Output, "LINES "+strconv.Itoa(n)+" ALLOWED 3") {
		t.Fatalf("junk: %s", body)
	}
	ledger := h.ledger()
	if bytes.Contains(ledger, []byte("SECRET123")) {
		t.Errorf("the ledger holds a query value the command sent")
	}
	var callBytes, conns, allowedConns, notRecorded, maxRec int
	for _, line := range bytes.SplitAfter(ledger, []byte("\n")) {
		var rec audit.Record
		if len(line) == 0 {
			continue
		}
		testutil.Must(t, json.Unmarshal(line, &rec))
		if rec.CallID != res.CallID {
			continue
		}
		callBytes += len(line)
		switch rec.Kind {
		case audit.KindConnection:
			conns++
			maxRec = max(maxRec, len(line))
			if rec.Verdict == api.VerdictAllow {
				allowedConns++
			}
		case audit.KindDropped:
			k, err := strconv.Atoi(strings.Fields(rec.Detail)[0])
			if err != nil || rec.Reason != api.ReasonLimitExceeded {
				t.Fatalf("dropped record: %s", line)
			}
			notRecorded += k
			t.Logf("summary: %s", line)
		}
	}
	t.Logf("call %s: %d ledger bytes, %d connection records (largest %d bytes), %d not recorded", res.CallID, callBytes, conns, maxRec, notRecorded)
	// The documented bound: the budget, plus the call's own decision and
	// result records and the summary, each a few KiB at most.
	if limit := budget + 16<<10; callBytes > limit {
		t.Fatalf("one call wrote %d ledger bytes, want at most %d (budget %d)", callBytes, limit, budget)
	}
	if maxRec > 2<<10 {
		t.Errorf("a connection record of %d bytes, want at most 2 KiB", maxRec)
	}
	if conns+notRecorded != n+3 {
		t.Errorf("%d records and %d counted as not recorded, want %d connections in all", conns, notRecorded, n+3)
	}
	if allowedConns != 3 {
		t.Errorf("%d allowed connections recorded, want 3: refused ones take at most half the budget", allowedConns)
	}
}

// pyConnFlood opens argv[1] connections to the proxy one after another,
// each sending a line the proxy refuses as malformed, and prints how many
// it made.
const pyConnFlood = `
import socket, sys
n = int(sys.argv[1])
for i in range(n):
    c = socket.create_connection(('127.0.0.1', 3128))
    try:
        c.sendall(b'garbage\r\n\r\n')
        c.recv(100)
    except OSError:
        pass
    c.close()
print('CONNS', n)
`

// TestReview5EgressConnFlood (the fifth review): every connection a
// command made to its proxy was a ledger record, without limit: one
// python loop wrote 52,137 records (35 MB) in 5 s, a disk filler that
// ends in audit_unavailable for every principal. Connections beyond a
// per-call rate are now refused before anything is read or dialed, and
// one record per call counts them.
// docs/security.md, "The fifth review"
func TestReview5EgressConnFlood(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 3000
	eg := `"egress":{"hosts":["localhost:1"],"schemes":["http"],"insecure_allow_private":true}`
	m := `{"schema_version":1,"tools":{"flood":{"operation":"execute","pool":0,"timeout_ms":120000,` +
		`"commands":[["python3","-c",` + mustString(pyConnFlood) + `,"` + strconv.Itoa(n) + `"]],` + eg + `}}}`
	h := start(t, writeManifest(t, t.TempDir(), m), securefs.ModeAuto)
	res, body := h.call("flood", map[string]any{})
	if res.Verdict != api.VerdictAllow || res.Output == nil || !strings.Contains(*res.Output, "CONNS "+strconv.Itoa(n)) {
		t.Fatalf("flood: %s", body)
	}
	records, refused := 0, 0
	for _, line := range bytes.Split(bytes.TrimSpace(h.ledger()), []byte("\n")) {
		var rec audit.Record
		testutil.Must(t, json.Unmarshal(line, &rec))
		if rec.CallID != res.CallID {
			continue
		}
		if rec.Kind == audit.KindDropped { // past the call's audit budget (exec_egress.go)
			k, err := strconv.Atoi(strings.Fields(rec.Detail)[0])
			if err != nil {
				t.Fatalf("dropped record: %s", line)
			}
			refused += k
			continue
		}
		if rec.Kind != audit.KindConnection {
			continue
		}
		if rec.Reason == api.ReasonBusy {
			k, err := strconv.Atoi(strings.Fields(rec.Detail)[0])
			if err != nil {
				t.Fatalf("summary record: %s", line)
			}
			refused += k
			continue
		}
		records++
	}
	limit := egressConnBurst + int(egressConnRate*res.DurationMS/1000) + 1
	if records > limit {
		t.Fatalf("%d connections made %d records in %.0f ms (at most %d allowed)", n, records, res.DurationMS, limit)
	}
	t.Logf("records %d refused %d duration %.0f ms", records, refused, res.DurationMS)
	if records+refused != n {
		t.Fatalf("%d records and %d refused, want %d in all", records, refused, n)
	}
}
