package replay

import (
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
)

const changing = `{"schema_version":1,
  "principals":{"agent":{"uids":[1000],"tools":["*"]}},
  "tools":{"edit_file":{"operation":"edit","roots":["ws"]},
           "move_file":{"operation":"move","roots":["ws"]},
           "make_dir":{"operation":"mkdir","roots":["ws"]}}}`

// changingCalls are edit, move and mkdir decisions as the daemon records
// them: an edit's texts by digest and length, a move's two targets by
// name, a mkdir with parents whose parent did not exist yet.
var changingCalls = []call{
	{"edit_file", "allow", "allowed", map[string]any{"path": "ws/a.txt",
		"edits": []map[string]any{{"old_sha256": "sha256:x", "old_len": 3, "new_sha256": "sha256:y", "new_len": 4}}}, ok("ws", "a.txt"), 0},
	{"move_file", "allow", "allowed", map[string]any{"path": "ws/a.txt", "to": "ws/b.txt"}, map[string][]authz.Resource{
		"path": ok("ws", "a.txt"),
		"to":   {{RootPath: "ws", Outcome: authz.OutcomeOK, Kind: api.KindAbsent, Rel: "b.txt", Path: "/x/ws/b.txt"}}}, 0},
	{"make_dir", "allow", "allowed", map[string]any{"path": "ws/n/m", "parents": true},
		[]authz.Resource{{RootPath: "ws", Outcome: authz.OutcomeNotFound}}, 0},
	{"make_dir", "deny", "not_found", map[string]any{"path": "ws/n/m"},
		[]authz.Resource{{RootPath: "ws", Outcome: authz.OutcomeNotFound}}, 0},
}

// TestReplayChangingOps: each new operation's record re-decides as it
// was decided under the same manifest, and flips where a stricter one
// hides a name it touched (a move's destination included).
func TestReplayChangingOps(t *testing.T) {
	led := ledger(t, changingCalls)
	if rep := run(t, changing, led); rep.Decisions != len(changingCalls) || rep.Changed != 0 {
		t.Fatalf("same manifest: %s: %+v", rep.Summary(), rep.Changes)
	}
	strict := `{"schema_version":1,
	  "principals":{"agent":{"uids":[1000],"tools":["*"]}},
	  "tools":{"edit_file":{"operation":"edit","roots":["ws"],"never":["a.txt"]},
	           "move_file":{"operation":"move","roots":["ws"],"never":["b.txt"]},
	           "make_dir":{"operation":"mkdir","roots":["ws"],"never":["n"]}}}`
	rep := run(t, strict, led)
	want := map[string]api.Reason{"c-a": api.ReasonNeverListed, "c-b": api.ReasonNeverListed, "c-c": api.ReasonNeverListed, "c-d": api.ReasonNeverListed}
	if rep.AllowToDeny != 3 || rep.Changed != 4 {
		t.Fatalf("stricter: %s: %+v", rep.Summary(), rep.Changes)
	}
	for _, c := range rep.Changes {
		if want[c.CallID] != c.NewReason {
			t.Errorf("%s: %s, want %s", c.CallID, c.NewReason, want[c.CallID])
		}
	}
}
