//go:build linux

package daemon

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
)

// FuzzStreamEvents: the NDJSON a streamed call writes (streamEmitter) is
// one line of valid JSON per event, whatever bytes the command's output
// and stderr hold; each line decodes as the client decodes it (api.Event)
// back to what was sent, output byte for byte; and under deny_detail
// "opaque" a denial's two lines carry only event, call_id, verdict and
// reason "unavailable"; an allowed call's result carries its source, a
// denial's none.
//
// The call is driven the way pipeline drives it: an allowed command sends
// its decision, its output chunks, then its result; a denial sends its
// decision and its result; a call that waited for a human first sends the
// pending decision that names the approval.
func FuzzStreamEvents(f *testing.F) {
	f.Add(uint8(0), uint8(0), false, false, []byte("hello\n"), []byte("warn\n"), []byte("err"), "/b/workspace/src/a.py", 0)
	f.Add(uint8(1), uint8(6), true, false, []byte{}, []byte{}, []byte{}, "/b/workspace/src/.env", -1)
	f.Add(uint8(1), uint8(5), false, true, []byte("\xff\xfe\n\u2028"), []byte("\"}\n{\"event\":\"result\""), []byte("\xc3"), "/b/x\ny", 2)
	f.Add(uint8(2), uint8(12), true, true, []byte("€"[:2]), []byte("€"[2:]), []byte("\x00\x1b[31m"), "", 137)
	f.Fuzz(func(t *testing.T, verdictSel, reasonSel uint8, opaque, approval bool, out, errOut, stderr []byte, resource string, exit int) {
		if !utf8.ValidString(resource) {
			// A resource is a kernel path; encoding/json writes U+FFFD
			// for a byte that is not UTF-8 (see docs/testing.md).
			resource = strings.ToValidUTF8(resource, "\uFFFD")
		}
		verdict := []api.Verdict{api.VerdictAllow, api.VerdictDeny, ""}[int(verdictSel)%3]
		reason := api.Reasons[int(reasonSel)%len(api.Reasons)]
		if verdict == api.VerdictAllow {
			reason = api.ReasonAllowed
		}
		dd := ""
		if opaque {
			dd = "opaque"
		}
		c := &call{
			p:     &policy{m: &authz.Manifest{DenyDetail: dd, Version: "sha256:00"}},
			id:    "c-0123456789abcdef",
			start: time.Now(),
			dec:   authz.Decision{Verdict: verdict, Reason: reason, Rule: "r", Resource: &authz.Resource{Path: resource}},
		}
		rec := httptest.NewRecorder()
		em := &streamEmitter{w: rec, rc: http.NewResponseController(rec), timeout: time.Second, c: c}

		type sent struct {
			event        string
			stream, data string // output
			raw          []byte // output
		}
		var want []sent
		if approval {
			em.decision(api.DecisionEvent{Event: api.EventDecision, CallID: c.id, Verdict: api.VerdictPending,
				Reason: api.ReasonApprovalRequired, ApprovalID: "a-1"})
			want = append(want, sent{event: api.EventDecision})
		}
		var o *outcome
		if c.dec.Allowed() {
			c.decoded = &decoded{req: api.CallRequest{Tool: "t"}, tool: &authz.Tool{Operation: api.OpExecute}}
		}
		em.decision(c.decisionEvent())
		want = append(want, sent{event: api.EventDecision})
		if c.dec.Allowed() {
			for _, ch := range []struct {
				stream string
				b      []byte
			}{{"stdout", out}, {"stderr", errOut}} {
				em.output(ch.stream, ch.b)
				want = append(want, sent{event: api.EventOutput, stream: ch.stream, raw: ch.b})
			}
			o = &outcome{ok: exit == 0, reason: api.ReasonAllowed, output: append(append([]byte(nil), out...), errOut...), result: &execResult{stderr: stderr, exitCode: &exit}}
		}
		em.result(c.present(o))
		want = append(want, sent{event: api.EventResult})

		body := rec.Body.Bytes()
		if len(body) == 0 || body[len(body)-1] != '\n' {
			t.Fatalf("stream does not end with a newline: %q", body)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/x-ndjson" {
			t.Fatalf("Content-Type %q", ct)
		}
		if n := bytes.Count(body, []byte("\n")); n != len(want) {
			t.Fatalf("%d lines for %d events: %q", n, len(want), body)
		}
		// As client.Stream reads it.
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(make([]byte, 64<<10), 256<<20)
		for i := 0; sc.Scan(); i++ {
			line := sc.Bytes()
			if !json.Valid(line) || !utf8.Valid(line) {
				t.Fatalf("line %d is not valid UTF-8 JSON: %q", i, line)
			}
			var ev api.Event
			if err := json.Unmarshal(line, &ev); err != nil {
				t.Fatalf("line %d: %v: %q", i, err, line)
			}
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(line, &fields); err != nil {
				t.Fatalf("line %d is not an object: %q", i, line)
			}
			w := want[i]
			if ev.Event != w.event {
				t.Fatalf("line %d is a %q event, want %q: %q", i, ev.Event, w.event, line)
			}
			if ev.Event != api.EventOutput && ev.CallID != c.id {
				t.Fatalf("line %d: call_id %q", i, ev.CallID)
			}
			final := !(approval && i == 0)
			if opaque && final && !c.dec.Allowed() {
				// Only that it was denied.
				keys := make([]string, 0, len(fields))
				for k := range fields {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				if strings.Join(keys, ",") != "call_id,event,reason,verdict" || ev.Verdict != api.VerdictDeny || ev.Reason != api.ReasonUnavailable {
					t.Fatalf("opaque denial shows more than that it was denied: %s", line)
				}
				continue
			}
			switch ev.Event {
			case api.EventOutput:
				got := []byte(ev.Data)
				if ev.DataB64 != "" {
					var err error
					if got, err = base64.StdEncoding.DecodeString(ev.DataB64); err != nil || ev.Data != "" {
						t.Fatalf("line %d: data_b64 %v (data %q)", i, err, ev.Data)
					}
				}
				if ev.Stream != w.stream || !bytes.Equal(got, w.raw) {
					t.Fatalf("output does not round-trip: sent %s %q, got %s %q", w.stream, w.raw, ev.Stream, got)
				}
			case api.EventDecision:
				if !final {
					if ev.Verdict != api.VerdictPending || ev.ApprovalID != "a-1" {
						t.Fatalf("pending decision: %s", line)
					}
					continue
				}
				if ev.Verdict != c.dec.WireVerdict() || ev.Reason != reason {
					t.Fatalf("decision %s/%s, want %s/%s", ev.Verdict, ev.Reason, c.dec.WireVerdict(), reason)
				}
			case api.EventResult:
				if _, ok := fields["output"]; ok {
					t.Fatalf("a streamed result repeats the output: %s", line)
				}
				if _, ok := fields["output_b64"]; ok {
					t.Fatalf("a streamed result repeats the output: %s", line)
				}
				if ev.Verdict != c.dec.WireVerdict() || ev.Reason != reason || ev.PolicyVersion != "sha256:00" {
					t.Fatalf("result: %s", line)
				}
				wantRes := resource
				if reason == api.ReasonOutsideRoots {
					wantRes = ""
				}
				if ev.Resource != wantRes {
					t.Fatalf("result resource %q, want %q", ev.Resource, wantRes)
				}
				if o == nil && (ev.OK || ev.Bytes != 0 || ev.ExitCode != nil || ev.Stderr != "" || ev.Source != nil) {
					t.Fatalf("a denial shows a run: %s", line)
				}
				if o != nil && (ev.Source == nil || *ev.Source != api.Source{Tool: "t", Operation: api.OpExecute, Resource: wantRes,
					PolicyVersion: "sha256:00", CallID: c.id, Untrusted: true}) {
					t.Fatalf("result source: %s", line)
				}
				if o != nil {
					if ev.Bytes != int64(len(o.output)) || ev.ExitCode == nil || *ev.ExitCode != exit || ev.OK != (exit == 0) {
						t.Fatalf("result fields: %s", line)
					}
					if ev.Stderr != validStderr(stderr) {
						t.Fatalf("stderr %q, want %q", ev.Stderr, validStderr(stderr))
					}
				}
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	})
}
