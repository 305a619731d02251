package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/termsafe"
)

// fakeDaemon answers POST /v1/calls on a unix socket: out as a call's
// output, and, streamed, as output events cut after every byte.
func fakeDaemon(t *testing.T, out string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.CallRequest
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		res := api.CallResult{CallID: "c-1", Verdict: api.VerdictAllow, Reason: api.ReasonAllowed, OK: true}
		if !req.Stream {
			res.Output = &out
			json.NewEncoder(w).Encode(res)
			return
		}
		enc := json.NewEncoder(w)
		for i := 0; i < len(out); i++ {
			enc.Encode(api.Event{Event: api.EventOutput, Stream: "stdout", DataB64: base64.StdEncoding.EncodeToString([]byte(out[i : i+1]))})
		}
		enc.Encode(api.Event{Event: api.EventResult, CallResult: res})
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestCallOutputToTerminal: what a call returns (a file, a command's
// output, a web page) is the agent's, and reaches a terminal escaped, with
// a warning; to a pipe or a file it goes as it is (docs/security.md, "The
// third review": the approval screen could be spoofed; so could any
// terminal sluice writes an agent's bytes to).
func TestCallOutputToTerminal(t *testing.T) {
	const out = "build ok\r\x1b[2K\x1b]52;c;Y3VybA==\x07é\u202e\n"
	sock := fakeDaemon(t, out)
	for _, c := range []struct {
		name     string
		terminal bool
		args     []string
	}{
		{"terminal", true, nil},
		{"terminal, streamed", true, []string{"--stream"}},
		{"pipe", false, nil},
		{"pipe, streamed", false, []string{"--stream"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			was := isTerminal
			isTerminal = func(io.Writer) bool { return c.terminal }
			defer func() { isTerminal = was }()
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"--socket", sock, "call", "t"}, c.args...), &stdout, &stderr)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			if !c.terminal {
				if stdout.String() != out || stderr.Len() != 0 {
					t.Errorf("to a pipe: %q, stderr %q; want the output as it is", stdout.String(), stderr.String())
				}
				return
			}
			if want := `build ok\r\x1b[2K\x1b]52;c;Y3VybA==\x07é\u202e` + "\n"; stdout.String() != want {
				t.Errorf("to a terminal: %q, want %q", stdout.String(), want)
			}
			if !strings.Contains(stderr.String(), "! the output contains 5 control/invisible characters, shown escaped") {
				t.Errorf("no warning: %q", stderr.String())
			}
			for _, s := range []string{stdout.String(), stderr.String()} {
				if _, n := termsafe.Escape(s, true); n != 0 {
					t.Errorf("%d raw control/invisible characters reached the terminal: %q", n, s)
				}
			}
		})
	}
}
