package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
)

const statusHelp = `Usage: sluice status [--json]

What sluiced is doing now (GET /v1/status): its version and policy_version,
the calls in flight (principal, tool, task, age, and the approval a parked
one waits for), the calls waiting for approval (how many, the oldest), the
execute tools' warm pools (ready of size), the attached MCP sessions
(docs/clients.md), the denials of the last 5
minutes by reason, and the principals' budgets (rate, denials in the
window, a lockout and when it ends). An approver sees every principal's; anyone else only
their own calls, approvals and denials, and no pools or sessions.

  --json   print the daemon's JSON
`

func (e *env) status(args []string) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "")
	pos, code, ok := e.parse(fs, args, statusHelp)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		fmt.Fprint(e.stderr, statusHelp)
		return ExitUsage
	}
	c := e.client()
	defer c.Close()
	st, err := c.Status(e.ctx)
	if err != nil {
		return e.transportErr(err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(st)
		return ExitOK
	}
	printStatus(e.stdout, st)
	return ExitOK
}

// printStatus shows a status readably. Tool names and task ids come from
// the agents' requests: escaped (screen.field), and a warning follows when
// anything was.
func printStatus(w io.Writer, st *api.Status) {
	var s screen
	version := st.Version
	if st.Revision != "" {
		version += " (rev " + st.Revision + ")"
	}
	fmt.Fprintf(w, "sluiced %s, policy_version %s, audit %s\n", version, st.PolicyVersion, st.Audit)
	if st.Scope == "all" {
		fmt.Fprintf(w, "showing every principal (you are %s, an approver)\n", s.field(st.Principal))
	} else {
		fmt.Fprintf(w, "showing %s's own calls (an approver sees every principal's)\n", s.field(st.Principal))
	}
	fmt.Fprintf(w, "\ncalls in flight: %d\n", len(st.Calls))
	if len(st.Calls) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  CALL\tPRINCIPAL\tTOOL\tTASK\tAGE\tWAITING FOR")
		for _, c := range st.Calls {
			waiting := "-"
			if c.ApprovalID != "" {
				waiting = "approval " + c.ApprovalID
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", s.field(c.CallID), s.field(c.Principal), s.field(c.Tool), s.field(dash(c.Task)),
				age(c.AgeS), s.field(waiting))
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "waiting for approval: %d", st.Approvals.Count)
	if st.Approvals.Count > 0 {
		fmt.Fprintf(w, " (the oldest began %s ago)", age(st.Approvals.OldestAgeS))
	}
	fmt.Fprintln(w)
	if st.Scope == "all" {
		if len(st.Pools) == 0 {
			fmt.Fprintln(w, "pools: none (no execute tool keeps warm containers)")
		} else {
			parts := make([]string, len(st.Pools))
			for i, p := range st.Pools {
				parts[i] = fmt.Sprintf("%s %d/%d ready", s.field(p.Tool), p.Ready, p.Size)
			}
			fmt.Fprintf(w, "pools: %s\n", strings.Join(parts, ", "))
		}
		fmt.Fprintf(w, "attached MCP sessions: %d\n", st.MCPSessions)
	}
	window := time.Duration(st.Denials.WindowS) * time.Second
	fmt.Fprintf(w, "denials in the last %s: %d", strings.TrimSuffix(window.String(), "0s"), st.Denials.Total)
	if st.Denials.Total > 0 {
		reasons := make([]string, 0, len(st.Denials.ByReason))
		for r := range st.Denials.ByReason {
			reasons = append(reasons, r)
		}
		sort.Slice(reasons, func(i, j int) bool {
			a, b := st.Denials.ByReason[reasons[i]], st.Denials.ByReason[reasons[j]]
			return a > b || a == b && reasons[i] < reasons[j]
		})
		for i, r := range reasons {
			reasons[i] = fmt.Sprintf("%s %d", s.field(r), st.Denials.ByReason[r])
		}
		fmt.Fprintf(w, " (%s)", strings.Join(reasons, ", "))
	}
	fmt.Fprintf(w, "\ntasks remembered: %d (sluice tasks list)\n", st.Tasks)
	printBudgets(w, &s, st.Budgets) // budget.go
	if s.hidden > 0 {
		fmt.Fprintf(w, "! %d control/invisible characters in tool names or task ids, shown escaped\n", s.hidden)
	}
}

// age is seconds as a short duration: 850ms, 12.3s, 4m5s.
func age(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

const cancelHelp = `Usage: sluice cancel CALL_ID

End one call in flight (POST /v1/calls/CALL_ID/cancel): a running command
is killed, a call waiting for approval ends, a write that has not committed
does not. Its result, to the agent and in the audit, says "cancelled" and
by whom. Your own calls; an approver may cancel anyone's. "sluice status"
lists the calls in flight and their ids.

Exit: 0 cancelled, 1 no such call of yours is in flight, 2 usage or transport.
`

func (e *env) cancel(args []string) int {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	pos, code, ok := e.parse(fs, args, cancelHelp)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintf(e.stderr, "sluice cancel: want exactly one CALL_ID\n\n%s", cancelHelp)
		return ExitUsage
	}
	c := e.client()
	defer c.Close()
	cc, err := c.CancelCall(e.ctx, pos[0])
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Status == 404 {
		fmt.Fprintf(e.stderr, "sluice cancel: no call %s of yours is in flight (it ended, or it is not yours; see sluice status)\n", safeLine(pos[0]))
		return ExitFailed
	}
	if err != nil {
		return e.transportErr(err)
	}
	fmt.Fprintf(e.stdout, "cancelled call %s: its result says cancelled\n", safeLine(cc.CallID))
	return ExitOK
}

const tasksListHelp = `Usage: sluice tasks list [--json]

The tasks sluiced remembers (GET /v1/tasks): those used within its
--task-ttl (default 1 h), cancelled within it, or with calls in flight;
yours, or every principal's for an approver. Each with its generation (a
cancel bumps it), when it was last used, whether it is cancelled, and its
calls in flight.
`

func (e *env) tasksList(args []string) int {
	fs := flag.NewFlagSet("tasks list", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "")
	pos, code, ok := e.parse(fs, args, tasksListHelp)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		fmt.Fprint(e.stderr, tasksListHelp)
		return ExitUsage
	}
	c := e.client()
	defer c.Close()
	ts, err := c.Tasks(e.ctx)
	if err != nil {
		return e.transportErr(err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(ts)
		return ExitOK
	}
	if len(ts.Tasks) == 0 {
		fmt.Fprintln(e.stdout, "no tasks")
		return ExitOK
	}
	var s screen
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tPRINCIPAL\tGENERATION\tIN FLIGHT\tLAST USED\tCANCELLED")
	for _, t := range ts.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", s.field(t.Task), s.field(t.Principal), t.Generation, t.InFlight,
			dash(t.LastUsed), dash(t.Cancelled))
	}
	tw.Flush()
	if s.hidden > 0 {
		fmt.Fprintf(e.stdout, "! %d control/invisible characters in task ids, shown escaped\n", s.hidden)
	}
	return ExitOK
}
