package replay

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
)

// The read-only operations' records (stat, search, list with depth, a
// ranged read) re-decide from the ledger alone.
const readOpsBase = `{"schema_version":1,
  "principals":{"agent":{"uids":[1000],"tools":["*"]}},
  "tools":{"read_file":{"operation":"read","roots":["ws/src"],"never":[".env"]},
           "ls":{"operation":"list","roots":["ws/src"],"never":[".env"]},
           "stat":{"operation":"stat","roots":["ws/src"],"never":[".env"]},
           "grep":{"operation":"search","roots":["ws/src"],"never":[".env"]}}}`

func dirAt(root, rel string) []authz.Resource {
	return []authz.Resource{{RootPath: root, Outcome: authz.OutcomeOK, Kind: api.KindDir, Rel: rel, Path: "/x/" + root + "/" + rel}}
}

var readOpsCalls = []call{
	{"stat", "allow", "allowed", map[string]any{"path": "ws/src/a.py"}, ok("ws/src", "a.py"), 0},
	{"grep", "allow", "allowed", map[string]any{"path": "ws/src/lib", "content": "TODO", "name": "*.py", "max_results": 5}, dirAt("ws/src", "lib"), 0},
	{"ls", "allow", "allowed", map[string]any{"path": "ws/src", "depth": 3, "sizes": true}, dirAt("ws/src", "."), 0},
	{"read_file", "allow", "allowed", map[string]any{"path": "ws/src/a.py", "offset": 10, "limit": 5}, ok("ws/src", "a.py"), 0},
	{"read_file", "allow", "allowed", map[string]any{"path": "ws/src/a.py", "tail": 20}, ok("ws/src", "a.py"), 0},
	{"stat", "deny", "never_listed", map[string]any{"path": "ws/src/.env"}, nil, 0},
	{"grep", "deny", "invalid_args", map[string]any{"path": "ws/src"}, nil, 0},
	{"grep", "deny", "invalid_args", map[string]any{"path": "ws/src", "content": "(a"}, nil, 0},
	{"read_file", "deny", "invalid_args", map[string]any{"path": "ws/src/a.py", "tail": 2, "offset": 1}, nil, 0},
	{"ls", "deny", "invalid_args", map[string]any{"path": "ws/src", "depth": 99}, nil, 0},
}

func TestReadOpsReplaySame(t *testing.T) {
	rep := run(t, readOpsBase, ledger(t, readOpsCalls))
	if rep.Decisions != len(readOpsCalls) || rep.Changed != 0 {
		t.Fatalf("%s: %+v", rep.Summary(), rep.Changes)
	}
}

func TestReadOpsReplayStricter(t *testing.T) {
	// *.py hidden: the stat of a.py and the ranged reads of it flip;
	// lib hidden: the search beneath it flips. A list of the root still
	// lists it (never-listed names are left out, not refused).
	strict := strings.ReplaceAll(readOpsBase, `"never":[".env"]`, `"never":[".env","*.py","lib/**"]`)
	rep := run(t, strict, ledger(t, readOpsCalls))
	want := map[string]api.Reason{"c-a": api.ReasonNeverListed, "c-b": api.ReasonNeverListed, "c-d": api.ReasonNeverListed, "c-e": api.ReasonNeverListed}
	if rep.AllowToDeny != len(want) || rep.DenyToAllow != 0 || rep.Changed != len(want) {
		t.Fatalf("%s: %+v", rep.Summary(), rep.Changes)
	}
	for _, c := range rep.Changes {
		if want[c.CallID] != c.NewReason {
			t.Errorf("%s: %s %s, want deny %s", c.CallID, c.New, c.NewReason, want[c.CallID])
		}
	}
}
