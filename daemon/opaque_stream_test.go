//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
)

// TestOpaqueDenialsStreamed: under deny_detail "opaque" a streamed denial
// shows, in its decision event and in its result event alike, only that it
// was denied: every field of both raw lines is checked, so a resource, a
// rule, a policy_version or a real reason leaking into either fails it.
// The ledger keeps each real reason.
func TestOpaqueDenialsStreamed(t *testing.T) {
	fx := escapetest.Build(t)
	uid := os.Getuid()
	m := writeManifest(t, fx.Base, fmt.Sprintf(`{"schema_version":1,"deny_detail":"opaque",
	  "principals":{"agent":{"uids":[%d],"tools":["read_file","run"]}},
	  "tools":{"read_file":{"operation":"read","roots":["workspace/src"],"never":[".env"]},
	           "list_dir":{"operation":"list","roots":["workspace/src"]},
	           "run":{"operation":"execute","commands":[["echo","a"]],"mounts":["workspace/src"],"pool":0}}}`, uid))
	h := start(t, m, securefs.ModeAuto)
	for _, tc := range []struct {
		tool, args string
		real       api.Reason // what the ledger records
	}{
		{"read_file", `{"path":"workspace/src/.env"}`, api.ReasonNeverListed},
		{"read_file", `{"path":"workspace/secret.txt"}`, api.ReasonOutsideRoots},
		{"read_file", `{"path":"workspace/src/missing"}`, api.ReasonNotFound},
		{"run", `{"argv":["echo","b"]}`, api.ReasonCommandNotAllowed},
		{"no_such_tool", `{"path":"workspace/src/a.py"}`, api.ReasonUnknownTool},
		{"list_dir", `{"path":"workspace/src"}`, api.ReasonPrincipalNotAllowed},
	} {
		var lines [][]byte
		res, err := h.c.Stream(context.Background(), api.CallRequest{Tool: tc.tool, Args: json.RawMessage(tc.args)},
			func(ev api.Event) error {
				lines = append(lines, ev.Raw)
				return nil
			})
		if err != nil {
			t.Fatalf("%s %s: %v", tc.tool, tc.args, err)
		}
		if len(lines) != 2 {
			t.Errorf("%s %s (%s): %d events, want decision and result: %s", tc.tool, tc.args, tc.real, len(lines), bytes.Join(lines, []byte(" ")))
			continue
		}
		var callID string
		for i, want := range []string{api.EventDecision, api.EventResult} {
			var fields map[string]any
			if err := json.Unmarshal(lines[i], &fields); err != nil {
				t.Fatalf("%s: %v", lines[i], err)
			}
			var keys []string
			for k := range fields {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			id, _ := fields["call_id"].(string)
			if strings.Join(keys, ",") != "call_id,event,reason,verdict" || fields["event"] != want ||
				fields["verdict"] != "deny" || fields["reason"] != api.ReasonUnavailable || id == "" {
				t.Errorf("%s %s (%s): opaque %s event shows %s", tc.tool, tc.args, tc.real, want, lines[i])
			}
			if i == 0 {
				callID = id
			} else if id != callID {
				t.Errorf("%s: result call_id %q, decision's %q", tc.tool, id, callID)
			}
		}
		if res.Reason != api.ReasonUnavailable || res.Verdict != api.VerdictDeny {
			t.Errorf("%s %s: result %+v", tc.tool, tc.args, res)
		}
		if !bytes.Contains(h.ledger(), []byte(`"reason":"`+string(tc.real)+`"`)) {
			t.Errorf("the ledger lacks the real reason %s", tc.real)
		}
	}
}
