//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
)

func execManifest(t *testing.T) (*escapetest.Fixture, string) {
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	bin, err := os.ReadFile(testutil.Probe(t))
	testutil.Must(t, err)
	testutil.Must(t, os.WriteFile(filepath.Join(fx.Base, "workspace/tests/probe"), bin, 0o755))
	m := writeFile(t, fx.Base, "exec.json", `{"schema_version":1,"tools":{
	  "probe":{"operation":"execute","mounts":["workspace/src","workspace/tests"],"cwd":"workspace/tests",
	    "never":[".env","*.pem","private/**"],
	    "commands":[["./probe","status"],["./probe","fds"],["./probe","mount"],["./probe","unshare-user"],
	                ["./probe","tiocsti-highbits"],["./probe","x32"],["./probe","i386"],["./probe","connect","80"],
	                ["./probe","read","../src/.env"],["./probe","write","../src/x"],["sh","-c","cat ../src/*.py ../src/id.pem ../src/sub/.env ../src/private/keys.txt 2>/dev/null; echo end"]]},
	  "sleeper":{"operation":"execute","commands":[["sleep","600"]],"timeout_ms":60000,"pool":0},
	  "cold":{"operation":"execute","commands":[["true"]],"pool":0}}}`)
	return fx, m
}

// TestExecuteBlackBox: the real sluiced binary (its own init hook, its
// seccomp profile, its helper) runs the probes over the real socket.
func TestExecuteBlackBox(t *testing.T) {
	testutil.RequireRoot(t)
	_, m := execManifest(t)
	d := startDaemon(t, m)
	for _, argv := range [][]string{{"./probe", "status"}, {"./probe", "fds"}, {"./probe", "mount"}, {"./probe", "unshare-user"},
		{"./probe", "tiocsti-highbits"}, {"./probe", "x32"}, {"./probe", "i386"}, {"./probe", "connect", "80"},
		{"./probe", "read", "../src/.env"}, {"./probe", "write", "../src/x"}, {"sh", "-c", "cat ../src/*.py ../src/id.pem ../src/sub/.env ../src/private/keys.txt 2>/dev/null; echo end"}} {
		args, _ := json.Marshal(map[string]any{"argv": argv})
		res, err := d.c.Call(context.Background(), api.CallRequest{Tool: "probe", Args: args})
		if err != nil {
			t.Fatal(err)
		}
		out := ""
		if res.Output != nil {
			out = *res.Output
		}
		out += res.Stderr
		if res.Verdict != "allow" || strings.Contains(out, "ESCAPED") || strings.Contains(out, escapetest.Secret) {
			t.Errorf("%v: %s/%s: %q", argv, res.Verdict, res.Reason, out)
		}
		switch argv[1] {
		case "status":
			for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
				if !strings.Contains(out, want) {
					t.Errorf("status lacks %q: %s", want, out)
				}
			}
			// its own uid from the default range, the same as its gid
			rng := sandbox.DefaultIDRange
			var uid, gid [4]uint32
			for _, line := range strings.Split(out, "\n") {
				fmt.Sscanf(line, "Uid:\t%d\t%d\t%d\t%d", &uid[0], &uid[1], &uid[2], &uid[3])
				fmt.Sscanf(line, "Gid:\t%d\t%d\t%d\t%d", &gid[0], &gid[1], &gid[2], &gid[3])
			}
			if uid[0] < rng.First || uid[0] > rng.Last || uid != [4]uint32{uid[0], uid[0], uid[0], uid[0]} || gid != uid {
				t.Errorf("uids %v gids %v inside: want one id of %s in each", uid, gid, rng)
			}
		case "fds":
			if strings.TrimSpace(out) != "FDS:0,1,2," {
				t.Errorf("fds: %q", out)
			}
		}
	}
	// a command outside the list
	args, _ := json.Marshal(map[string]any{"argv": []string{"./probe", "setuid0"}})
	if res, _ := d.c.Call(context.Background(), api.CallRequest{Tool: "probe", Args: args}); res.Reason != "command_not_allowed" {
		t.Fatalf("unlisted argv: %s", res.Reason)
	}
	d.stop()
	if left := d.leftovers(); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// TestExecuteCrashRecovery: sluiced is SIGKILLed while a command runs; the
// container is orphaned. The next start sweeps it: no process, cgroup,
// mount or rootfs of it survives.
func TestExecuteCrashRecovery(t *testing.T) {
	testutil.RequireRoot(t)
	_, m := execManifest(t)
	d := startOwnDaemon(t, m)
	go d.c.Call(context.Background(), api.CallRequest{Tool: "sleeper"})
	// Killed while the sleeper's own command runs: its allowed decision
	// is in the ledger and its "sleep 600" is a live process in the run
	// dir's cgroups (the probe tool's pooled helpers do not count).
	if err := testutil.Poll(20*time.Second, func() error {
		if !(sleeperDecided(d) && sleeperRunning(d.runDir)) {
			return errors.New("not decided and running yet")
		}
		return nil
	}); err != nil {
		t.Fatal("the sleeper never started")
	}
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
	d.cmd = nil
	if left := sandbox.Leftovers(d.runDir); len(left) == 0 {
		t.Fatal("expected an orphaned container after SIGKILL")
	}
	d.start()
	if res, err := d.c.Call(context.Background(), api.CallRequest{Tool: "cold"}); err != nil || !res.OK {
		t.Fatalf("after restart: %v %+v", err, res)
	}
	d.stop() // stderr is complete once the process has exited
	if !strings.Contains(d.logs.String(), "removed sandbox leftovers") {
		t.Errorf("sweep not logged: %s", d.logs)
	}
	if left := sandbox.Leftovers(d.runDir); len(left) > 0 {
		for _, l := range left {
			if pid, ok := strings.CutPrefix(l, "process "); ok {
				b, _ := os.ReadFile("/proc/" + pid + "/status")
				c, _ := os.ReadFile("/proc/" + pid + "/cmdline")
				t.Logf("%s: %q\n%s", pid, c, b[:min(len(b), 300)])
			}
		}
		t.Fatalf("left behind after a crash and a restart: %v", left)
	}
	if b, _ := os.ReadFile(d.ledger()); !bytes.Contains(b, []byte(`"tool":"sleeper"`)) {
		t.Fatal("the crashed call's decision is not in the ledger")
	}
}

// sleeperDecided: the ledger holds the sleeper's allowed decision.
func sleeperDecided(d *daemon) bool {
	b, _ := os.ReadFile(d.ledger())
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `"kind":"decision"`) && strings.Contains(line, `"tool":"sleeper"`) && strings.Contains(line, `"verdict":"allow"`) {
			return true
		}
	}
	return false
}

// sleeperRunning: a live "sleep 600" runs in the run dir's cgroups.
func sleeperRunning(runDir string) bool {
	for _, l := range sandbox.Leftovers(runDir) {
		if pid, ok := strings.CutPrefix(l, "process "); ok {
			if c, _ := os.ReadFile("/proc/" + pid + "/cmdline"); string(c) == "sleep\x00600\x00" {
				return true
			}
		}
	}
	return false
}

// TestExecuteLimitsBlackBox: the limits a manifest sets, enforced by the
// real daemon's cgroups (cgroup v1 or v2, in or outside systemd): memory
// (an OOM kill is limit_exceeded and the daemon goes on serving), pids
// (a fork bomb), the timeout, an exit code, and no network.
func TestExecuteLimitsBlackBox(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	bin, err := os.ReadFile(testutil.Probe(t))
	testutil.Must(t, err)
	testutil.Must(t, os.WriteFile(filepath.Join(fx.Base, "workspace/tests/probe"), bin, 0o755))
	port, accepted := testutil.Listener(t)
	tool := func(argv []string, extra string) string {
		b, _ := json.Marshal(argv)
		return `{"operation":"execute","mounts":["workspace/tests"],"cwd":"workspace/tests","pool":1,"commands":[` + string(b) + `]` + extra + `}`
	}
	m := writeFile(t, fx.Base, "limits.json", `{"schema_version":1,"tools":{
	  "balloon":`+tool([]string{"./probe", "balloon", "512"}, `,"memory_mb":32,"timeout_ms":60000`)+`,
	  "forkbomb":`+tool([]string{"sh", "-c", "b() { b | b & }; b; sleep 100"}, `,"pids":16,"timeout_ms":5000`)+`,
	  "sleeper":`+tool([]string{"sleep", "600"}, `,"timeout_ms":1000`)+`,
	  "egress":`+tool([]string{"./probe", "connect", port}, `,"timeout_ms":60000`)+`,
	  "exit3":`+tool([]string{"sh", "-c", "echo out; exit 3"}, `,"timeout_ms":60000`)+`}}`)
	d := startDaemon(t, m)
	for _, tc := range []struct {
		tool, reason, want string
		ok                 bool
		exit               int
	}{
		{"balloon", "limit_exceeded", "", false, -1},
		{"forkbomb", "limit_exceeded", "", false, -1},
		{"sleeper", "timeout", "", false, -1},
		{"egress", "allowed", "blocked:connect", true, 0},
		{"exit3", "allowed", "out", false, 3},
	} {
		res, err := d.c.Call(context.Background(), api.CallRequest{Tool: tc.tool, Args: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatalf("%s: %v", tc.tool, err)
		}
		out := res.Stderr
		if res.Output != nil {
			out = *res.Output + out
		}
		if res.Verdict != "allow" || string(res.Reason) != tc.reason || res.OK != tc.ok || !strings.Contains(out, tc.want) {
			t.Errorf("%s: %s/%s ok=%t, want allow/%s ok=%t with %q: %q", tc.tool, res.Verdict, res.Reason, res.OK, tc.reason, tc.ok, tc.want, out)
		}
		if tc.exit >= 0 && (res.ExitCode == nil || *res.ExitCode != tc.exit) {
			t.Errorf("%s: exit code %v, want %d", tc.tool, res.ExitCode, tc.exit)
		}
		if _, err := d.c.Health(context.Background()); err != nil {
			t.Fatalf("the daemon stopped serving after %s: %v", tc.tool, err)
		}
	}
	if accepted() != 0 {
		t.Error("a container reached a listener on the host's 127.0.0.1")
	}
	d.stop()
	if left := d.leftovers(); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
	if out, _, code := sluice(t, "", "audit", "verify", d.ledger()); code != 0 {
		t.Fatalf("audit verify: %s", out)
	}
}

// TestContainerKilledFromOutside: a command whose process a host process
// SIGKILLs ends killed, with signal SIGKILL and no exit code, on the wire
// and in the ledger; a command that exits 137 by itself stays allowed
// with exit code 137.
// docs/security.md, "The second review (Hardening II)", "One daemon per run dir and state dir"
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
