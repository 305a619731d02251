package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
)

const budgetHelp = `Usage: sluice budget reset PRINCIPAL

Give PRINCIPAL its whole rate and denial budget back (POST
/v1/budgets/PRINCIPAL/reset; approver principals only): the denials counted
in its window are cleared, a lockout (its calls refused budget_exhausted)
ends now, and its rate's bucket is full again. The reset is recorded in the
audit ledger (kind budget_reset) with your principal. "sluice status" shows
each principal's budgets and when a lockout ends by itself. A delegation
token's own budget (its calls are counted apart from its minter's) is
PRINCIPAL "token:ID".

Exit: 0 reset, 3 you are not an approver, 1 PRINCIPAL has no budget,
2 usage or transport.
`

func (e *env) budget(args []string) int {
	if len(args) == 0 || args[0] != "reset" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(e.stdout, budgetHelp)
			return ExitOK
		}
		fmt.Fprint(e.stderr, budgetHelp)
		return ExitUsage
	}
	fs := flag.NewFlagSet("budget reset", flag.ContinueOnError)
	pos, code, ok := e.parse(fs, args[1:], budgetHelp)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintf(e.stderr, "sluice budget reset: want exactly one PRINCIPAL\n\n%s", budgetHelp)
		return ExitUsage
	}
	c := e.client()
	defer c.Close()
	r, err := c.ResetBudget(e.ctx, pos[0])
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Status == 404 {
		fmt.Fprintf(e.stderr, "sluice budget reset: principal %s has no rate or denial_budget in the manifest\n", safeLine(pos[0]))
		return ExitFailed
	}
	if err != nil {
		return e.transportErr(err)
	}
	msg := fmt.Sprintf("reset the budgets of %s: %d denials in the window cleared", safeLine(r.Principal), r.Cleared)
	if r.ExhaustedUntil != "" {
		msg += "; its lockout (until " + safeLine(r.ExhaustedUntil) + ") ended"
	}
	fmt.Fprintln(e.stdout, msg)
	return ExitOK
}

// printBudgets is the budgets part of sluice status: one line a
// principal with a rate or denial budget.
func printBudgets(w io.Writer, s *screen, budgets []api.StatusBudget) {
	if len(budgets) == 0 {
		return
	}
	fmt.Fprintln(w, "budgets:")
	for _, b := range budgets {
		var parts []string
		if r := b.Rate; r != nil {
			parts = append(parts, fmt.Sprintf("rate %g/s burst %d (%.1f available, %d refused)", r.PerSecond, r.Burst, r.Available, b.RateLimited))
		}
		if db := b.DenialBudget; db != nil {
			p := fmt.Sprintf("denials %d of %d in %ds", db.Spent, db.Denials, db.WindowS)
			if db.ExhaustedUntil != "" {
				p = fmt.Sprintf("EXHAUSTED until %s (%d refused; sluice budget reset %s)", s.field(db.ExhaustedUntil), b.BudgetExhausted, s.field(b.Principal))
			} else if b.BudgetExhausted > 0 {
				p += fmt.Sprintf(" (%d refused earlier)", b.BudgetExhausted)
			}
			parts = append(parts, p)
		}
		fmt.Fprintf(w, "  %s: %s\n", s.field(b.Principal), strings.Join(parts, "; "))
	}
}
