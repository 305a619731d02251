package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/testutil"
)

const base = `{"schema_version":1,
  "principals":{"agent":{"uids":[1000],"tools":["*"]}},
  "tools":{"read_file":{"operation":"read","roots":["ws/src","ws/tests"],"never":[".env"]},
           "write_file":{"operation":"write","roots":["ws/src"],"max_bytes":10},
           "run":{"operation":"execute","commands":[["true"]]}}}`

func manifest(t *testing.T, s string) *authz.Manifest {
	t.Helper()
	m, err := authz.Parse(strings.NewReader(s), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type call struct {
	tool, verdict, reason string
	args                  any
	resolved              any // []authz.Resource, or by target name for an operation of two
	uid                   uint32
}

func ok(root, rel string) []authz.Resource {
	return []authz.Resource{{RootPath: root, Outcome: authz.OutcomeOK, Kind: api.KindFile, Rel: rel, Path: "/x/" + root + "/" + rel}}
}

// ledger writes a real, chained ledger of decision records.
func ledger(t *testing.T, calls []call) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "audit.jsonl")
	l, _, err := audit.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range calls {
		uid := c.uid
		if uid == 0 {
			uid = 1000
		}
		rec := &audit.Record{Kind: audit.KindDecision, CallID: "c-" + string(rune('a'+i)), Tool: c.tool,
			Verdict: api.Verdict(c.verdict), Reason: api.Reason(c.reason), Principal: &audit.Principal{Name: "agent", UID: uid, GID: uid}}
		rec.Args, _ = json.Marshal(c.args)
		if c.resolved != nil {
			rec.Resolved, _ = json.Marshal(c.resolved)
		}
		if _, err := l.Append(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

var calls = []call{
	{"read_file", "allow", "allowed", map[string]any{"path": "ws/src/a.py"}, ok("ws/src", "a.py"), 0},
	{"read_file", "allow", "allowed", map[string]any{"path": "ws/tests/t.py"}, []authz.Resource{{RootPath: "ws/tests", Outcome: authz.OutcomeOK, Kind: api.KindFile, Rel: "t.py"}}, 0},
	{"read_file", "deny", "never_listed", map[string]any{"path": "ws/src/.env"}, nil, 0},
	{"run", "allow", "allowed", map[string]any{"argv": []string{"true"}}, nil, 0},
	{"write_file", "deny", "limit_exceeded", map[string]any{"path": "ws/src/n.txt", "content_len": 20, "content_sha256": "sha256:x", "mode": "create_or_overwrite"},
		[]authz.Resource{{RootPath: "ws/src", Outcome: authz.OutcomeOK, Kind: api.KindAbsent, Rel: "n.txt"}}, 0},
	{"read_file", "deny", "principal_not_allowed", map[string]any{"path": "ws/src/a.py"}, nil, 2000},
}

func run(t *testing.T, m, led string) *Report {
	t.Helper()
	f, err := os.Open(led)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := Run(manifest(t, m), f)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestSameManifestFlipsNone(t *testing.T) {
	rep := run(t, base, ledger(t, calls))
	if rep.Decisions != len(calls) || rep.Changed != 0 {
		t.Fatalf("%s: %+v", rep.Summary(), rep.Changes)
	}
}

func TestStricterManifestFlipsKnownCalls(t *testing.T) {
	strict := `{"schema_version":1,
	  "principals":{"agent":{"uids":[1000],"tools":["read_file","write_file"]}},
	  "tools":{"read_file":{"operation":"read","roots":["ws/src"],"never":[".env","*.py"]},
	           "write_file":{"operation":"write","roots":["ws/src"],"max_bytes":10},
	           "run":{"operation":"execute","commands":[["false"]]}}}`
	rep := run(t, strict, ledger(t, calls))
	want := map[string]api.Reason{"c-a": api.ReasonNeverListed, "c-b": api.ReasonOutsideRoots, "c-d": api.ReasonPrincipalNotAllowed}
	if rep.AllowToDeny != 3 || rep.DenyToAllow != 0 || rep.Changed != 3 {
		t.Fatalf("%s: %+v", rep.Summary(), rep.Changes)
	}
	for _, c := range rep.Changes {
		if want[c.CallID] != c.NewReason || c.New != api.VerdictDeny {
			t.Errorf("%s: %s %s, want deny %s", c.CallID, c.New, c.NewReason, want[c.CallID])
		}
	}
	if !strings.HasPrefix(rep.Summary(), "6 decisions, 3 would change: 3 allow→deny, 0 deny→allow") {
		t.Errorf("summary: %s", rep.Summary())
	}
}

func TestLooserManifestFlipsDenyToAllow(t *testing.T) {
	loose := strings.Replace(base, `"max_bytes":10`, `"max_bytes":100`, 1)
	loose = strings.Replace(loose, `"uids":[1000]`, `"uids":[1000,2000]`, 1)
	rep := run(t, loose, ledger(t, calls))
	if rep.DenyToAllow != 1 || rep.Changes[0].CallID != "c-e" {
		t.Fatalf("%s: %+v", rep.Summary(), rep.Changes)
	}
	// The unmapped uid now maps, but its path was never resolved: the
	// record cannot show what the kernel would have said.
	var saw bool
	for _, c := range rep.Changes {
		if c.CallID == "c-f" && c.NewReason == api.ReasonNotFound {
			saw = true
		}
	}
	if !saw {
		t.Errorf("an unresolved call should replay as not_found: %+v", rep.Changes)
	}
}

func TestTamperedLedgerIsRefused(t *testing.T) {
	led := ledger(t, calls)
	b, err := os.ReadFile(led)
	testutil.Must(t, err)
	testutil.Must(t, os.WriteFile(led, bytes.Replace(b, []byte("ws/tests/t.py"), []byte("ws/tests/x.py"), 1), 0o600))
	f, err := os.Open(led)
	testutil.Must(t, err)
	defer f.Close()
	_, err = Run(manifest(t, base), f)
	var ve *audit.VerifyError
	if !errors.As(err, &ve) || ve.Seq != 2 {
		t.Fatalf("tampered ledger: %v", err)
	}
}

// TestPatternedDecisionReplays: an execute call allowed by a path element
// replays from the resolutions its record keeps (the argument and the
// root the kernel resolved it beneath): the same manifest flips nothing;
// one whose element names another root flips it to command_not_allowed;
// a record from before patterns (no resolutions) still replays.
func TestPatternedDecisionReplays(t *testing.T) {
	const patterned = `{"schema_version":1,
	  "principals":{"agent":{"uids":[1000],"tools":["*"]}},
	  "tools":{"pytest":{"operation":"execute","mounts":["ws"],"cwd":"ws",
	    "commands":[["python3","-m","pytest",{"path":["ws/tests"]},"-k",{"regex":"[a-z_]+"}],["true"]]}}}`
	argv := []string{"python3", "-m", "pytest", "tests/test_calc.py", "-k", "add"}
	res := []authz.Resource{{Arg: 3, RootPath: "ws/tests", Outcome: authz.OutcomeOK, Kind: api.KindFile, Rel: "test_calc.py", Path: "/x/ws/tests/test_calc.py"}}
	led := ledger(t, []call{
		{"pytest", "allow", "allowed", map[string]any{"argv": argv}, res, 0},
		{"pytest", "deny", "command_not_allowed", map[string]any{"argv": []string{"python3", "-m", "pytest", "../secret.txt", "-k", "add"}}, nil, 0},
		{"pytest", "allow", "allowed", map[string]any{"argv": []string{"true"}}, nil, 0},
	})
	if rep := run(t, patterned, led); rep.Decisions != 3 || rep.Changed != 0 {
		t.Fatalf("same manifest: %s: %+v", rep.Summary(), rep.Changes)
	}
	other := strings.Replace(patterned, `{"path":["ws/tests"]}`, `{"path":["ws/src"]}`, 1)
	rep := run(t, other, led)
	if rep.Changed != 1 || rep.Changes[0].CallID != "c-a" || rep.Changes[0].NewReason != api.ReasonCommandNotAllowed {
		t.Fatalf("another root: %s: %+v", rep.Summary(), rep.Changes)
	}
}

// TestBudgetRefusalsStand: a call refused rate_limited or budget_exhausted
// was refused by the principal's budgets, which the daemon keeps, not by
// the policy: replayed under the same manifest it stands, as a human's
// or the daemon's state's refusal does.
func TestBudgetRefusalsStand(t *testing.T) {
	refused := []call{
		{"read_file", "deny", "rate_limited", map[string]any{"path": "ws/src/a.py"}, nil, 0},
		{"read_file", "deny", "budget_exhausted", map[string]any{"path": "ws/src/a.py"}, nil, 0},
	}
	if rep := run(t, base, ledger(t, refused)); rep.Decisions != 2 || rep.Changed != 0 {
		t.Fatalf("%s: %+v", rep.Summary(), rep.Changes)
	}
}
