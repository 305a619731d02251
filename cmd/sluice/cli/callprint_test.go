package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
)

// scriptedDaemon answers POST /v1/calls with res; a streamed call first
// gets a pending decision (expiring at expires) when pending is set.
func scriptedDaemon(t *testing.T, res api.CallResult, pending bool, expires time.Time) (sock string, streamed *atomic.Bool) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	streamed = new(atomic.Bool)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.CallRequest
		json.NewDecoder(r.Body).Decode(&req)
		streamed.Store(req.Stream)
		enc := json.NewEncoder(w)
		if !req.Stream {
			enc.Encode(res)
			return
		}
		if pending {
			enc.Encode(api.DecisionEvent{Event: api.EventDecision, CallID: res.CallID, Verdict: api.VerdictPending,
				Reason: api.ReasonApprovalRequired, ApprovalID: "a-01ABC", ExpiresAt: expires.UTC().Format(time.RFC3339Nano)})
		}
		if res.Output != nil {
			enc.Encode(api.Event{Event: api.EventOutput, Stream: "stdout", Data: *res.Output})
		}
		final := res
		final.Output = nil
		enc.Encode(api.Event{Event: api.EventResult, CallResult: final})
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock, streamed
}

// TestCallNeverSilent: a call on a terminal that waits for a human says
// so at once, with how long it may wait; its output, once approved, is
// printed as an unstreamed call's is; the approver's note and an
// invalid_args detail are printed. Golden lines.
func TestCallNeverSilent(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	wasNow, wasTerm := now, isTerminal
	defer func() { now, isTerminal = wasNow, wasTerm }()
	now = func() time.Time { return at }
	out := "hello\n"
	for _, c := range []struct {
		name         string
		res          api.CallResult
		pending      bool
		terminal     bool
		code         int
		stdout, want string
	}{
		{"denied with a note", api.CallResult{CallID: "c-1", Verdict: api.VerdictDeny, Reason: api.ReasonApprovalDenied,
			ApprovalNote: "use the staging copy\x1b[2J"}, true, true, ExitDenied, "",
			"sluice: waiting for approval a-01ABC (expires in 4m58s); an approver runs: sluice approve a-01ABC\n" +
				"sluice: denied: approval_denied (the approver's note: use the staging copy\\x1b[2J)\n"},
		{"approved with a note", api.CallResult{CallID: "c-1", Verdict: api.VerdictAllow, Reason: api.ReasonAllowed, OK: true,
			Output: &out, ApprovalNote: "ok this once"}, true, true, ExitOK, "hello\n",
			"sluice: waiting for approval a-01ABC (expires in 4m58s); an approver runs: sluice approve a-01ABC\n" +
				"sluice: approved; the approver's note: ok this once\n"},
		{"invalid args", api.CallResult{CallID: "c-1", Verdict: api.VerdictDeny, Reason: api.ReasonInvalidArgs,
			Detail: "argv is required: this tool has 3 command patterns; see sluice tools --json"}, false, false, ExitDenied, "",
			"sluice: denied: invalid_args: argv is required: this tool has 3 command patterns; see sluice tools --json\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			isTerminal = func(io.Writer) bool { return c.terminal }
			sock, streamed := scriptedDaemon(t, c.res, c.pending, at.Add(4*time.Minute+58*time.Second+200*time.Millisecond))
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"--socket", sock, "call", "t"}, &stdout, &stderr)
			if code != c.code || stdout.String() != c.stdout || stderr.String() != c.want {
				t.Errorf("exit %d (want %d)\nstdout %q (want %q)\nstderr %q\nwant   %q", code, c.code, stdout.String(), c.stdout, stderr.String(), c.want)
			}
			if streamed.Load() != c.terminal {
				t.Errorf("streamed under the hood: %v, want %v (stderr a terminal: %v)", streamed.Load(), c.terminal, c.terminal)
			}
		})
	}
}
