//go:build linux

package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
)

// TestAuditDefaultAndFilters: audit tail and verify read $SLUICE_AUDIT
// when given no FILE; tail's --denied, --principal and --tool keep only
// the records that match all of them.
func TestAuditDefaultAndFilters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, _, err := audit.OpenWith(path, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []audit.Record{
		{Kind: audit.KindDecision, CallID: "c-1", Tool: "read_file", Verdict: api.VerdictAllow, Reason: api.ReasonAllowed, Principal: &audit.Principal{Name: "agent"}},
		{Kind: audit.KindDecision, CallID: "c-2", Tool: "read_file", Verdict: api.VerdictDeny, Reason: api.ReasonOutsideRoots, Principal: &audit.Principal{Name: "agent"}},
		{Kind: audit.KindDecision, CallID: "c-3", Tool: "write_file", Verdict: api.VerdictDeny, Reason: api.ReasonNeverListed, Principal: &audit.Principal{Name: "other"}},
		{Kind: audit.KindResult, CallID: "c-1", Tool: "read_file", Verdict: api.VerdictAllow, Reason: api.ReasonAllowed, Principal: &audit.Principal{Name: "agent"}},
	} {
		if err := l.AppendSync(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_AUDIT", path)
	for _, c := range []struct {
		args []string
		want []string // a word each line shown has, in order
	}{
		{nil, []string{"allowed", "outside_roots", "never_listed", "allowed"}},
		{[]string{"--denied"}, []string{"outside_roots", "never_listed"}},
		{[]string{"--principal", "agent"}, []string{"allowed", "outside_roots", "allowed"}},
		{[]string{"--tool", "write_file"}, []string{"never_listed"}},
		{[]string{"--denied", "--principal", "agent", "--tool", "read_file"}, []string{"outside_roots"}},
		{[]string{"--principal", "nobody"}, nil},
		{[]string{"-n", "1", "--principal", "agent"}, []string{"allowed"}},
	} {
		code, out, errOut := runCLI(t, append([]string{"audit", "tail"}, c.args...)...)
		if code != ExitOK {
			t.Errorf("tail %v: exit %d: %s", c.args, code, errOut)
			continue
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if out == "" {
			lines = nil
		}
		ok := len(lines) == len(c.want)
		for i := 0; ok && i < len(lines); i++ {
			ok = strings.Contains(lines[i], c.want[i])
		}
		if !ok {
			t.Errorf("tail %v: want lines with %v, got:\n%s", c.args, c.want, out)
		}
	}
	if code, out, errOut := runCLI(t, "audit", "verify"); code != ExitOK || !strings.Contains(out, "ok: 4 records, hash chain intact") {
		t.Errorf("verify of $SLUICE_AUDIT: exit %d: %s%s", code, out, errOut)
	}
	t.Setenv("SLUICE_AUDIT", filepath.Join(t.TempDir(), "none.jsonl"))
	if code, _, errOut := runCLI(t, "audit", "tail"); code != ExitUsage || !strings.Contains(errOut, "none.jsonl") || !strings.Contains(errOut, "no FILE given") {
		t.Errorf("tail of a missing default: exit %d: %s", code, errOut)
	}
}
