package replay

import (
	"testing"

	"github.com/sluicehq/sluice/api"
)

// TestReplayFlagsCaseFoldedReads: a read of ".ENV" or ".env." that an
// older sluice allowed (never matched byte for byte) re-decides as
// never_listed under the same manifest, so replay names the calls that
// may have leaked a hidden file on a case-insensitive disk.
func TestReplayFlagsCaseFoldedReads(t *testing.T) {
	leaked := []call{
		{"read_file", "allow", "allowed", map[string]any{"path": "ws/src/.ENV"}, ok("ws/src", ".ENV"), 0},
		{"read_file", "allow", "allowed", map[string]any{"path": "ws/src/.env."}, ok("ws/src", ".env."), 0},
		{"read_file", "allow", "allowed", map[string]any{"path": "ws/src/a.py"}, ok("ws/src", "A.PY"), 0},
	}
	rep := run(t, base, ledger(t, leaked))
	if rep.AllowToDeny != 2 || rep.Changed != 2 {
		t.Fatalf("%s: %+v", rep.Summary(), rep.Changes)
	}
	for _, c := range rep.Changes {
		if c.NewReason != api.ReasonNeverListed {
			t.Errorf("%s: %s, want never_listed", c.CallID, c.NewReason)
		}
	}
}
