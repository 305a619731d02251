//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// Secrets the redaction tests plant (docs/security.md, "Redaction"); none
// is live: the key id is AWS's documented example.
const (
	redactPEM = "-----BEGIN RSA PRIVATE KEY-----\n" +
		"MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n" +
		"VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n" +
		"-----END RSA PRIVATE KEY-----\n"
	redactKeyID  = "AKIAIOSFODNN7EXAMPLE"
	redactJWT    = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
	redactTicket = "TCK-424242"
)

// redactPieces are what must never leave: each secret, and a piece of
// the PEM body (a line of it alone would be a leak).
var redactPieces = []string{redactKeyID, redactJWT, redactTicket, "MIIEowIBAAKCAQEAu1SU1Lf", "VTLw7onLRnrq0"}

func checkNoSecret(t *testing.T, what string, b []byte) {
	t.Helper()
	for _, p := range redactPieces {
		if bytes.Contains(b, []byte(p)) {
			t.Errorf("%s: LEAK of %q: %s", what, p, b)
		}
	}
}

const redactKey = `"redact":{"patterns":[{"name":"ticket","regex":"TCK-[0-9]{6}"}]}`

// TestRedactReadSearch: a PEM key, an AWS key id, a JWT and a custom
// pattern in an allowed file are absent from a read, a ranged read, a
// search's lines (and a search for the secret finds nothing), and the
// ledger, which counts them by kind.
func TestRedactReadSearch(t *testing.T) {
	fx := escapetest.Build(t)
	content := "line 1\n" + redactPEM + "key = " + redactKeyID + "\ntoken: " + redactJWT + "\nsee " + redactTicket + "\nlast\n"
	testutil.Must(t, os.WriteFile(filepath.Join(fx.Base, "workspace/src/creds.txt"), []byte(content), 0o644))
	m := writeManifest(t, fx.Base, `{"schema_version":1,`+redactKey+`,"tools":{
		"read_file":{"operation":"read","roots":["workspace/src"]},
		"small":{"operation":"read","roots":["workspace/src"],"max_bytes":40},
		"search":{"operation":"search","roots":["workspace/src"]},
		"stat":{"operation":"stat","roots":["workspace/src"]},
		"plain":{"operation":"read","roots":["workspace/src"],"redact":{"builtin":false}}}}`)
	h := start(t, m, securefs.ModeAuto)

	// A stat of a file holding secrets tells no digest (it would confirm
	// a guessed secret); of a clean file, it does.
	testutil.Must(t, os.WriteFile(filepath.Join(fx.Base, "workspace/src/clean.txt"), []byte("nothing to see\n"), 0o644))
	for path, secret := range map[string]bool{"workspace/src/creds.txt": true, "workspace/src/clean.txt": false} {
		res, body := h.call("stat", map[string]any{"path": path})
		var st api.Stat
		if !res.OK || res.Output == nil || json.Unmarshal([]byte(*res.Output), &st) != nil {
			t.Fatalf("stat %s: %s", path, body)
		}
		if secret != (st.SHA256 == "") || secret != (res.Redacted > 0) || (res.Source != nil && (res.Source.SHA256 == "") != secret) {
			t.Errorf("stat %s: sha256 %q, redacted %d, source %+v", path, st.SHA256, res.Redacted, res.Source)
		}
	}

	res, body := h.call("read_file", map[string]any{"path": "workspace/src/creds.txt"})
	checkNoSecret(t, "read", body)
	want := "line 1\n[REDACTED:private_key]\n\n\n\nkey = [REDACTED:aws_access_key_id]\ntoken: [REDACTED:jwt]\nsee [REDACTED:ticket]\nlast\n"
	if res.Output == nil || *res.Output != want || res.Redacted != 4 || res.Bytes != int64(len(want)) {
		t.Fatalf("read: %s", body)
	}
	// A whole-file read's source carries the digest of what was read,
	// unless a secret was replaced: then it would confirm a guess.
	if res.Source == nil || res.Source.SHA256 != "" || res.SHA256 != "" {
		t.Fatalf("a redacted read's source names a digest (or has none): %s", body)
	}
	// Line numbers are the file's: the key's block kept its line breaks.
	res, body = h.call("read_file", map[string]any{"path": "workspace/src/creds.txt", "offset": 6, "limit": 2})
	checkNoSecret(t, "ranged read", body)
	if res.Output == nil || *res.Output != "key = [REDACTED:aws_access_key_id]\ntoken: [REDACTED:jwt]\n" || res.Redacted != 2 {
		t.Fatalf("ranged read: %s", body)
	}
	// A replacement longer than what it replaced is cut again to
	// max_bytes, at a line, and next_offset follows.
	res, body = h.call("small", map[string]any{"path": "workspace/src/creds.txt", "offset": 6})
	checkNoSecret(t, "small read", body)
	if res.Output == nil || *res.Output != "key = [REDACTED:aws_access_key_id]\n" || !res.Truncated || res.NextOffset == nil || *res.NextOffset != 7 || res.Bytes > 40 {
		t.Fatalf("small read: %s", body)
	}
	// A tool whose redact turns the built-ins off keeps the custom pattern.
	res, body = h.call("plain", map[string]any{"path": "workspace/src/creds.txt"})
	if !bytes.Contains(body, []byte(redactKeyID)) || bytes.Contains(body, []byte(redactTicket)) || res.Redacted != 1 {
		t.Fatalf("plain: %s", body)
	}

	res, body = h.call("search", map[string]any{"path": "workspace/src", "content": "."})
	checkNoSecret(t, "search", body)
	if res.Reason != api.ReasonAllowed || !bytes.Contains(body, []byte(`[REDACTED:jwt]`)) || res.Redacted == 0 {
		t.Fatalf("search: %s", body)
	}
	// The search matched the redacted text: no oracle for a guess.
	res, body = h.call("search", map[string]any{"path": "workspace/src/creds.txt", "content": "AKIA[A-Z0-9]+"})
	var found api.SearchResults
	if res.Output == nil || json.Unmarshal([]byte(*res.Output), &found) != nil || len(found.Matches) != 0 {
		t.Fatalf("a search for the key id found it: %s", body)
	}

	ledger := h.ledger()
	checkNoSecret(t, "ledger", ledger)
	if !bytes.Contains(ledger, []byte(`"redacted":{"aws_access_key_id":1,"jwt":1,"private_key":1,"ticket":1}`)) {
		t.Fatalf("the ledger does not count the read's redactions by kind:\n%s", ledger)
	}
}

// TestRedactCommandOutput: a key id a command prints across two writes,
// falling across the sandbox's 32 KiB reads, and a PEM key on stderr,
// are absent from the buffered and the streamed result; the streamed
// bytes are what the result counts.
func TestRedactCommandOutput(t *testing.T) {
	testutil.RequireRoot(t)
	script := fmt.Sprintf(`head -c 32760 /dev/zero | tr '\0' x; printf ' %s'; printf '%s tail\n'; printf '%%s' '%s' >&2; printf 'id %s\n' >&2`,
		redactKeyID[:11], redactKeyID[11:], strings.ReplaceAll(redactPEM, "\n", `\n`), redactJWT)
	fx, m := execFixture(t, []probeTool{{name: "leaky", argv: []string{"sh", "-c", script}, extra: "," + redactKey}})
	_ = fx
	h := start(t, m, securefs.ModeAuto)

	res, body := h.call("leaky", map[string]any{})
	checkNoSecret(t, "buffered", body)
	if res.Output == nil || !strings.HasSuffix(*res.Output, " [REDACTED:aws_access_key_id] tail\n") || res.Redacted != 3 ||
		!strings.Contains(res.Stderr, "[REDACTED:private_key]") || !strings.Contains(res.Stderr, "id [REDACTED:jwt]") {
		t.Fatalf("buffered: redacted %d, stderr %q, output ends %q", res.Redacted, res.Stderr, tail(res.Output))
	}

	var out, errOut strings.Builder
	var raw bytes.Buffer
	final, err := h.c.Stream(context.Background(), api.CallRequest{Tool: "leaky"}, func(ev api.Event) error {
		raw.Write(ev.Raw)
		switch ev.Stream {
		case "stdout":
			out.WriteString(ev.Data)
		case "stderr":
			errOut.WriteString(ev.Data)
		}
		return nil
	})
	testutil.Must(t, err)
	checkNoSecret(t, "streamed", raw.Bytes())
	if !strings.HasSuffix(out.String(), " [REDACTED:aws_access_key_id] tail\n") || final.Bytes != int64(out.Len()) ||
		final.Redacted != 3 || !strings.Contains(errOut.String(), "id [REDACTED:jwt]") {
		t.Fatalf("streamed: bytes %d of %d, redacted %d, stderr %q, stdout ends %q", final.Bytes, out.Len(), final.Redacted, errOut.String(), tail(&[]string{out.String()}[0]))
	}
	checkNoSecret(t, "ledger", h.ledger())
}

func tail(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return (*s)[max(0, len(*s)-60):]
}

// BenchmarkReadRedact is read_file of a 4 KiB text file over the socket
// with and without the built-in detectors (docs/performance.md,
// "Redaction"); it reports the p50 of the calls.
func BenchmarkReadRedact(b *testing.B) {
	fx := escapetest.Build(b)
	line := "2024-05-01T12:00:00Z INFO served GET /api/v1/items?page=3 in 4.2ms status=200 bytes=5123\n"
	testutil.Must(b, os.WriteFile(filepath.Join(fx.Base, "workspace/src/log.txt"), []byte(strings.Repeat(line, 4096/len(line)+1)[:4096]), 0o644))
	m := writeManifest(b, fx.Base, `{"schema_version":1,"tools":{
		"plain":{"operation":"read","roots":["workspace/src"]},
		"redacted":{"operation":"read","roots":["workspace/src"],"redact":{}}}}`)
	h := startB(b, m)
	for _, tool := range []string{"plain", "redacted"} {
		b.Run(tool, func(b *testing.B) {
			req := api.CallRequest{Tool: tool, Args: json.RawMessage(`{"path":"workspace/src/log.txt"}`)}
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				res, err := h.Call(context.Background(), req)
				lat = append(lat, time.Since(t0))
				if err != nil || !res.OK || res.Bytes != 4096 {
					b.Fatal(err, res)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		})
	}
}

// BenchmarkExecOutputRedact is a command printing 64 MiB of log lines,
// streamed through sluiced with a 64 MiB max_bytes, without and with the
// built-in detectors (docs/performance.md, "Redaction"): MB/s of output
// delivered to the caller.
func BenchmarkExecOutputRedact(b *testing.B) {
	testutil.RequireRoot(b)
	fx := escapetest.Build(b)
	testutil.Must(b, os.Chmod(fx.Base, 0o755))
	const n = 64 << 20
	script := fmt.Sprintf(`yes '2024-05-01T12:00:00Z INFO served GET /api/v1/items?page=3 in 4.2ms status=200 bytes=5123' | head -c %d`, n)
	argv, _ := json.Marshal([]string{"sh", "-c", script})
	tool := func(name, extra string) string {
		return fmt.Sprintf(`"%s":{"operation":"execute","commands":[%s],"mounts":["workspace/src"],"cwd":"workspace/src","pool":1,"max_bytes":%d,"timeout_ms":120000%s}`,
			name, argv, n, extra)
	}
	m := writeManifest(b, fx.Base, `{"schema_version":1,"tools":{`+tool("plain", "")+`,`+tool("redacted", `,"redact":{}`)+`}}`)
	h := startB(b, m)
	for _, name := range []string{"plain", "redacted"} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(n)
			for b.Loop() {
				var got int64
				res, err := h.Stream(context.Background(), api.CallRequest{Tool: name}, func(ev api.Event) error {
					got += int64(len(ev.Data))
					return nil
				})
				if err != nil || !res.OK || got != n {
					b.Fatal(err, res, got)
				}
			}
		})
	}
}
