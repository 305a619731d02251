//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestContainerKilledFromOutside: a command whose process a host process
// SIGKILLs ends killed, with signal SIGKILL and no exit code, on the wire
// and in the ledger; a command that exits 137 by itself stays allowed
// with exit code 137.
func TestContainerKilledFromOutside(t *testing.T) {
	testutil.RequireRoot(t)
	d := startOwnDaemon(t, oneDaemonManifest(t))
	ch := asyncCall(d.c, api.CallRequest{Tool: "sleeper"})
	pid := waitSleeper(t, d.runDir)
	// The lock files are O_CLOEXEC: the command holds none of the daemon's fds.
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, e := range fds {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); strings.Contains(l, ".sluiced.lock") {
			t.Errorf("the container's command holds the daemon's lock file: fd %s -> %s", e.Name(), l)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res := waitResult(t, ch, "sleeper")
	if res.Verdict != api.VerdictAllow || res.Reason != api.ReasonKilled || res.OK || res.Signal != "SIGKILL" || res.ExitCode != nil {
		t.Errorf("killed from outside: %+v, want allow/killed, signal SIGKILL, no exit code", res)
	}
	rec := ledgerRecord(t, d, res.CallID)
	if rec.Reason != "killed" || rec.Result == nil || rec.Result.Signal != "SIGKILL" || rec.Result.ExitCode != nil || rec.Result.OK {
		t.Errorf("ledger result: %+v %+v", rec, rec.Result)
	}

	res, err := d.c.Call(context.Background(), api.CallRequest{Tool: "exit137"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != api.ReasonAllowed || res.OK || res.ExitCode == nil || *res.ExitCode != 137 || res.Signal != "" {
		t.Errorf("exit 137 by itself: %+v, want allowed with exit code 137", res)
	}
	rec = ledgerRecord(t, d, res.CallID)
	if rec.Reason != "allowed" || rec.Result == nil || rec.Result.ExitCode == nil || *rec.Result.ExitCode != 137 || rec.Result.Signal != "" {
		t.Errorf("ledger result: %+v %+v", rec, rec.Result)
	}
	d.stop()
	if left := d.leftovers(); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

type resultRecord struct {
	Kind   string `json:"kind"`
	CallID string `json:"call_id"`
	Reason string `json:"reason"`
	Result *struct {
		OK       bool   `json:"ok"`
		ExitCode *int   `json:"exit_code"`
		Signal   string `json:"signal"`
	} `json:"result"`
}

// ledgerRecord is the result record of callID (written before the
// result is sent).
func ledgerRecord(t *testing.T, d *daemon, callID string) resultRecord {
	t.Helper()
	b, err := os.ReadFile(d.ledger())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var r resultRecord
		if json.Unmarshal(line, &r) == nil && r.Kind == "result" && r.CallID == callID {
			return r
		}
	}
	t.Fatalf("no result record for %s:\n%s", callID, b)
	return resultRecord{}
}
