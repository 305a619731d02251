//go:build linux

package daemon

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

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
