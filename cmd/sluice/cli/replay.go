package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/replay"
)

const replayHelp = `Usage: sluice replay --manifest NEW [--json] AUDIT_FILE

Re-decide every decision recorded in the audit ledger under the manifest
NEW, with the same pure decision function the daemon uses, and list the
calls whose verdict or reason would change, then a summary:
  N decisions, M would change: a allow→deny, b deny→allow

Nothing is looked up on disk: each call is decided from what its decision
record holds (the caller's uid and gid, mapped through NEW's principals;
the tool and args; the kernel's resolution of the path, per root). A root
that NEW has and the record lacks was never resolved and counts as
not_found. Denials that came from a person or the daemon's state
(approval_denied, approval_expired, task_cancelled, audit_unavailable)
stand unless NEW denies the call for a policy reason.

  --manifest NEW   the manifest to replay under (its base need not exist)
  --json           print the report as JSON

Exit: 0 (also when decisions change), 1 the ledger's chain is broken, 2 usage.
`

func (e *env) replay(args []string) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	manifest := fs.String("manifest", "", "")
	asJSON := fs.Bool("json", false, "")
	pos, code, ok := e.parse(fs, args, replayHelp)
	if !ok {
		return code
	}
	if *manifest == "" || len(pos) != 1 {
		fmt.Fprintf(e.stderr, "sluice replay: want --manifest NEW and one AUDIT_FILE\n\n%s", replayHelp)
		return ExitUsage
	}
	mf, err := os.Open(*manifest)
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice replay: %v\n", err)
		return ExitUsage
	}
	abs, _ := filepath.Abs(*manifest)
	m, err := authz.ParseFile(abs, mf, filepath.Dir(abs))
	mf.Close()
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice replay: %s: %v\n", *manifest, err)
		return ExitUsage
	}
	lf, err := os.Open(pos[0])
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice replay: %v\n", err)
		return ExitUsage
	}
	defer lf.Close()
	rep, err := replay.Run(m, lf)
	var ve *audit.VerifyError
	switch {
	case errors.As(err, &ve):
		fmt.Fprintf(e.stdout, "BROKEN at seq %d (line %d): %s\nnot replayed: the ledger cannot be trusted\n", ve.Seq, ve.Line, ve.Msg)
		return ExitFailed
	case err != nil:
		fmt.Fprintf(e.stderr, "sluice replay: %v\n", err)
		return ExitFailed
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(struct {
			*replay.Report
			PolicyVersion string `json:"policy_version"`
			Summary       string `json:"summary"`
		}{rep, m.Version, rep.Summary()})
		return ExitOK
	}
	if len(rep.Changes) > 0 {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tCALL\tPRINCIPAL\tTOOL\tPATH/ARGV\tRECORDED\tUNDER NEW\tRULE")
		for _, c := range rep.Changes {
			// The tool, path and argv are as the agent gave them: escaped.
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s %s\t%s %s\t%s\n", c.Seq, safeLine(c.CallID), safeLine(dash(c.Principal)),
				safeLine(c.Tool), safeLine(dash(c.Subject)), c.Old, c.OldReason, c.New, c.NewReason, safeLine(dash(c.Rule)))
		}
		tw.Flush()
	}
	fmt.Fprintln(e.stdout, rep.Summary())
	return ExitOK
}
