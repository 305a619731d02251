package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/api"
)

const approvalsHelp = `Usage: sluice approvals [--watch] [--json]

List the calls waiting for a human (approver principals only): approval
id, who asked, the tool, its args (file bodies appear as digests) and when
the approval expires, then what each call would change: for a write, a
unified diff of the new content against the file as it is now (binary or
very large content: sizes and sha256 digests only), for a delete the
file's size and digest, for a command its argv. Decide one with
"sluice approve ID" or "sluice deny ID". An approved write writes the
content whose digest is shown; the file itself is checked again (its
if_match) only when the write commits.

  --watch   keep listing: print each new waiting call as it arrives (Ctrl-C stops)
  --json    print JSON
`

func (e *env) approvals(args []string) int {
	fs := flag.NewFlagSet("approvals", flag.ContinueOnError)
	watch := fs.Bool("watch", false, "")
	asJSON := fs.Bool("json", false, "")
	pos, code, ok := e.parse(fs, args, approvalsHelp)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		fmt.Fprint(e.stderr, approvalsHelp)
		return ExitUsage
	}
	c := e.client()
	defer c.Close()
	seen := map[string]bool{}
	for first := true; ; first = false {
		list, err := c.Approvals(e.ctx)
		if err != nil {
			if e.ctx.Err() != nil {
				return ExitOK
			}
			return e.transportErr(err)
		}
		var fresh []api.Approval
		for _, a := range list.Approvals {
			if !seen[a.ApprovalID] {
				seen[a.ApprovalID] = true
				fresh = append(fresh, a)
			}
		}
		switch {
		case *asJSON:
			enc := json.NewEncoder(e.stdout)
			if *watch {
				for _, a := range fresh {
					enc.Encode(a)
				}
			} else {
				enc.SetIndent("", "  ")
				enc.Encode(list)
			}
		case len(fresh) > 0:
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			if first {
				fmt.Fprintln(tw, "APPROVAL\tPRINCIPAL\tTOOL\tARGS\tTASK\tEXPIRES")
			}
			for _, a := range fresh {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.ApprovalID, a.Principal, a.Tool, a.Args, dash(a.Task), a.ExpiresAt)
			}
			tw.Flush()
			for _, a := range fresh {
				printChange(e.stdout, a)
			}
		case first && !*watch:
			fmt.Fprintln(e.stdout, "no calls are waiting for approval")
		}
		if !*watch {
			return ExitOK
		}
		select {
		case <-e.ctx.Done():
			return ExitOK
		case <-time.After(time.Second):
		}
	}
}

// printChange shows what one waiting call would change.
func printChange(w io.Writer, a api.Approval) {
	ch := a.Change
	if ch == nil {
		return
	}
	fmt.Fprintf(w, "\n%s (%s, %s) would:\n", a.ApprovalID, a.Principal, a.Tool)
	state := func(what string, st *api.FileState) {
		if st == nil {
			fmt.Fprintf(w, "  %s: (does not exist)\n", what)
			return
		}
		if st.SHA256 == "" {
			fmt.Fprintf(w, "  %s: %d bytes (over 64 MiB: not hashed)\n", what, st.Size)
			return
		}
		fmt.Fprintf(w, "  %s: %d bytes, %s\n", what, st.Size, st.SHA256)
	}
	switch {
	case ch.Argv != nil:
		fmt.Fprintf(w, "  run: %s\n", quoteArgv(ch.Argv))
		return
	case ch.New == nil:
		fmt.Fprintln(w, "  delete the file")
		state("current", ch.Current)
		return
	}
	fmt.Fprintln(w, "  write the file")
	state("current", ch.Current)
	state("new", ch.New)
	switch {
	case ch.Binary:
		fmt.Fprintln(w, "  (binary content: no diff; compare the digests)")
	case ch.Diff != "":
		fmt.Fprint(w, ch.Diff)
		if ch.DiffTruncated {
			fmt.Fprintln(w, "  (diff cut at 64 KiB: compare the digests)")
		}
	case ch.DiffTruncated:
		fmt.Fprintln(w, "  (too large to diff: compare the sizes and digests)")
	}
}

// quoteArgv writes argv as a shell would read it back.
func quoteArgv(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

const decideHelp = `Usage: sluice approve ID [--note TEXT]
       sluice deny ID [--note TEXT]

Approve or deny the waiting call with approval id ID (approver principals
only). An approval is single-use. The note is recorded in the audit ledger
with your principal. An approved call is decided again under the current
manifest before it runs.
`

func (e *env) decide(approve bool, args []string) int {
	name := "deny"
	if approve {
		name = "approve"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	note := fs.String("note", "", "")
	pos, code, ok := e.parse(fs, args, decideHelp)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintf(e.stderr, "sluice %s: want exactly one approval ID\n\n%s", name, decideHelp)
		return ExitUsage
	}
	c := e.client()
	defer c.Close()
	o, err := c.Decide(e.ctx, pos[0], approve, *note)
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice: %v\n", err)
		return ExitFailed
	}
	verb := "denied"
	if o.Approved {
		verb = "approved"
	}
	fmt.Fprintf(e.stdout, "%s %s (call %s)\n", verb, o.ApprovalID, o.CallID)
	return ExitOK
}

const tasksHelp = `Usage: sluice tasks cancel TASK

Cancel a task (approvers, and the principal whose task it is): its running
commands are killed, its calls waiting for approval end, a write that has
not committed does not, and new calls with the task are denied
task_cancelled for sluiced's --task-ttl (default 1 h).
`

func (e *env) tasks(args []string) int {
	if len(args) == 0 || args[0] != "cancel" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(e.stdout, tasksHelp)
			return ExitOK
		}
		fmt.Fprint(e.stderr, tasksHelp)
		return ExitUsage
	}
	fs := flag.NewFlagSet("tasks cancel", flag.ContinueOnError)
	pos, code, ok := e.parse(fs, args[1:], tasksHelp)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprint(e.stderr, tasksHelp)
		return ExitUsage
	}
	c := e.client()
	defer c.Close()
	t, err := c.CancelTask(e.ctx, pos[0])
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice: %v\n", err)
		return ExitFailed
	}
	fmt.Fprintf(e.stdout, "cancelled task %s: %d call(s) ended, generation %d\n", t.Task, t.Ended, t.Generation)
	return ExitOK
}
