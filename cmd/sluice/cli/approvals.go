package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/termsafe"
)

const approvalsHelp = `Usage: sluice approvals [--watch] [--json]
       sluice approvals approve|deny ID [--note TEXT] [--grant DURATION]

List the calls waiting for a human (approver principals only): approval
id, who asked, the tool, its args (file bodies appear as digests) and when
the approval expires, then what each call would do, as its operation shows
it: a post's method, whole URL and body (the first 4 KiB, its size and
sha256); a fetch's method and URL; a write's path, the file as it is now
and a unified diff of the new content against it (binary or very large
content: sizes and sha256 digests only); a delete's path and the file's
size and digest; a command's argv. A tool with "approvers": N needs N
distinct approver principals: the listing says how many have approved and
who. Decide one with "sluice approve ID" or "sluice deny ID". An approved
write writes the content whose digest is shown, an approved post sends the
body whose digest is shown; the file itself is checked again (its
if_match) only when the write commits.

Everything shown comes from the agent. Control characters, escape
sequences, bidi overrides, zero-width and other invisible characters and
invalid UTF-8 are never written to the terminal: they are shown escaped
(\r, \x1b, \u202e, \xff), and a change that holds any says so first:
  ! this change contains 3 control/invisible characters, shown escaped
With no such line, every backslash shown is in the content itself.

  --watch   keep following sluiced's events (GET /v1/events): print each
            call as it starts waiting, and how each wait ends (approved,
            denied, expired), as it happens (Ctrl-C stops)
  --json    print JSON (strings as the daemon sent them: not for a terminal);
            with --watch, one event a line
`

func (e *env) approvals(args []string) int {
	if len(args) > 0 && (args[0] == "approve" || args[0] == "deny") {
		return e.decide(args[0] == "approve", args[1:])
	}
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
	if *watch {
		return e.watchApprovals(c, *asJSON)
	}
	list, err := c.Approvals(e.ctx)
	if err != nil {
		return e.transportErr(err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(list)
		return ExitOK
	}
	if len(list.Approvals) == 0 {
		fmt.Fprintln(e.stdout, "no calls are waiting for approval")
		return ExitOK
	}
	printApprovals(e.stdout, list.Approvals, true)
	return ExitOK
}

// watchApprovals follows GET /v1/events: the calls waiting when it
// subscribes, then each approval_parked (the call as GET /v1/approvals
// shows it) and approval_decided as it comes.
func (e *env) watchApprovals(c *client.Client, asJSON bool) int {
	seen := map[string]bool{}
	header := true
	fresh := func() error {
		list, err := c.Approvals(e.ctx)
		if err != nil {
			return err
		}
		var out []api.Approval
		for _, a := range list.Approvals {
			if !seen[a.ApprovalID] {
				seen[a.ApprovalID] = true
				out = append(out, a)
			}
		}
		if len(out) == 0 {
			return nil
		}
		if asJSON {
			enc := json.NewEncoder(e.stdout)
			for _, a := range out {
				enc.Encode(a)
			}
			return nil
		}
		printApprovals(e.stdout, out, header)
		header = false
		return nil
	}
	err := c.Events(e.ctx, func(ev api.DaemonEvent) error {
		switch ev.Event {
		case api.DaemonEventSubscribed:
			return fresh() // what waits already
		case api.DaemonEventApprovalParked:
			if asJSON {
				json.NewEncoder(e.stdout).Encode(ev)
				if ev.Approval != nil {
					seen[ev.Approval.ApprovalID] = true
				}
				return nil
			}
			return fresh()
		case api.DaemonEventApprovalDecided:
			if asJSON {
				json.NewEncoder(e.stdout).Encode(ev)
			} else if ev.Approval != nil {
				fmt.Fprintln(e.stdout, decidedLine(ev.Approval))
			}
		}
		return nil
	})
	if e.ctx.Err() != nil {
		return ExitOK
	}
	if errors.Is(err, client.ErrEventsEnded) {
		fmt.Fprintf(e.stderr, "sluice: %v\n", err)
		return ExitFailed
	}
	return e.transportErr(err)
}

// decidedLine says how a wait ended, in one line: every value escaped.
func decidedLine(a *api.ApprovalEvent) string {
	var s screen
	line := s.field(a.ApprovalID) + " (" + s.field(a.Principal) + ", " + s.field(a.Tool) + "): "
	switch {
	case a.Verdict == api.VerdictAllow:
		line += "approved"
		if len(a.ApprovedBy) > 0 {
			line += " by " + s.field(strings.Join(a.ApprovedBy, ", "))
		}
		if a.Grant != "" {
			line += ", with grant " + s.field(a.Grant)
		}
	case a.Reason == api.ReasonApprovalDenied:
		line += "denied by " + s.field(a.By)
	default:
		line += "ended: " + s.field(string(a.Reason))
	}
	return line
}

// printApprovals prints waiting calls: a table (with its header when
// header), then what each would do.
func printApprovals(w io.Writer, list []api.Approval, header bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, "APPROVAL\tPRINCIPAL\tTOOL\tARGS\tTASK\tEXPIRES")
	}
	shown := make([]screen, len(list))
	for i, a := range list {
		s := &shown[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.field(a.ApprovalID), s.field(approvalWho(a)), s.field(a.Tool),
			s.field(string(a.Args)), s.field(dash(a.Task)), s.field(a.ExpiresAt))
	}
	tw.Flush()
	for i, a := range list {
		printChange(w, a, &shown[i])
	}
}

// screen escapes what goes to the terminal (termsafe.Escape) and counts
// what it escaped, for the warning.
type screen struct{ hidden int }

// field is one value on one line: newlines and tabs are escaped too.
func (s *screen) field(v string) string {
	out, n := termsafe.Escape(v, false)
	s.hidden += n
	return out
}

// text is lines of text (a diff, a body): newlines and tabs stay.
func (s *screen) text(v string) string {
	out, n := termsafe.Escape(v, true)
	s.hidden += n
	return out
}

// maxShownBody is how much of a post's body the screen shows; the rest is
// told by its length and the whole body's digest.
const maxShownBody = 4 << 10

// printChange shows what one waiting call would do, as its operation
// rendered it (api.ApprovalChange): its summary, the file as it is now
// and as it would be, a body, a diff. Nothing here knows the operation.
// Every string is escaped; a warning comes first when anything was (or
// the daemon counted more than is shown: a body's tail).
func printChange(w io.Writer, a api.Approval, s *screen) {
	ch := a.Change
	if ch == nil {
		return
	}
	var b strings.Builder
	line := func(label, value string) { fmt.Fprintf(&b, "  %s: %s\n", label, s.field(value)) }
	for _, f := range ch.Summary {
		line(f.Label, f.Value)
	}
	if len(ch.Summary) == 0 { // a daemon from before summaries
		if ch.Argv != nil {
			line("run", authz.QuoteArgv(ch.Argv))
		}
		if ch.URL != "" {
			line("url", ch.URL)
		}
	}
	state := func(what string, st *api.FileState) {
		switch {
		case st == nil && what == "current" && ch.CurrentUnknown:
			fmt.Fprintf(&b, "  %s: (cannot be looked at now: not a regular file, or its root is gone)\n", what)
		case st == nil:
			fmt.Fprintf(&b, "  %s: (does not exist)\n", what)
		case st.SHA256 == "":
			fmt.Fprintf(&b, "  %s: %d bytes (over 64 MiB: not hashed)\n", what, st.Size)
		default:
			fmt.Fprintf(&b, "  %s: %d bytes, %s\n", what, st.Size, s.field(st.SHA256))
		}
	}
	if ch.Current != nil || ch.CurrentUnknown || ch.New != nil {
		state("current", ch.Current)
	}
	if ch.New != nil {
		state("new", ch.New)
	}
	if ch.Body != nil || ch.BodySHA256 != "" {
		printBody(&b, ch, s)
	}
	printChanges(&b, ch.Changes, s)
	switch {
	case ch.Binary:
		fmt.Fprintln(&b, "  (binary content: no diff; compare the digests)")
	case ch.Diff != "":
		d := s.text(ch.Diff)
		b.WriteString(d)
		if !strings.HasSuffix(d, "\n") {
			b.WriteString("\n")
		}
		if ch.DiffTruncated {
			fmt.Fprintln(&b, "  (diff cut at 64 KiB: compare the digests)")
		}
	case ch.DiffTruncated:
		fmt.Fprintln(&b, "  (too large to diff: compare the sizes and digests)")
	}
	verb := "would"
	if ch.Kind != "" {
		verb += " " + s.field(string(ch.Kind))
	}
	fmt.Fprintf(w, "\n%s (%s, %s) %s:\n", s.field(a.ApprovalID), s.field(approvalWho(a)), s.field(a.Tool), verb)
	if a.Approvers > 1 {
		who := "none yet"
		if len(a.ApprovedBy) > 0 {
			who = s.field(strings.Join(a.ApprovedBy, ", "))
		}
		fmt.Fprintf(w, "  approvals: %d of %d (%s)\n", len(a.ApprovedBy), a.Approvers, who)
	}
	if n := max(s.hidden, ch.HiddenChars); n > 0 {
		plural := "s"
		if n == 1 {
			plural = ""
		}
		fmt.Fprintf(w, "  ! this change contains %d control/invisible character%s, shown escaped\n", n, plural)
	}
	io.WriteString(w, b.String())
}

// printChanges lists a changeset, one line per change, every one of them
// (deletions come first from the daemon; never collapsed): an approver
// must see each file a command would delete.
func printChanges(b *strings.Builder, cs []api.Change, s *screen) {
	for _, c := range cs {
		switch c.Action {
		case "delete":
			if c.SHA256 != "" {
				fmt.Fprintf(b, "  DELETE %s (%d bytes, %s)\n", s.field(c.Path), c.Bytes, s.field(c.SHA256))
			} else {
				fmt.Fprintf(b, "  DELETE %s\n", s.field(c.Path))
			}
		case "mkdir":
			fmt.Fprintf(b, "  mkdir  %s\n", s.field(c.Path))
		default:
			fmt.Fprintf(b, "  %-6s %s (%d bytes, %s)\n", s.field(c.Action), s.field(c.Path), c.Bytes, s.field(c.SHA256))
		}
	}
}

// printBody shows a post's body: its length and digest, then at most
// maxShownBody bytes of it (cut on a character), indented, and how much
// more there is.
func printBody(b *strings.Builder, ch *api.ApprovalChange, s *screen) {
	size, sum := ch.BodyBytes, ch.BodySHA256
	if size == 0 {
		size = int64(len(ch.Body))
	}
	if sum == "" {
		h := sha256.Sum256(ch.Body)
		sum = "sha256:" + hex.EncodeToString(h[:])
	}
	fmt.Fprintf(b, "  body: %d bytes, %s\n", size, s.field(sum))
	if ch.Body == nil {
		fmt.Fprintln(b, "    (the body cannot be shown now: compare the digest)")
		return
	}
	body := ch.Body
	if len(body) > maxShownBody {
		cut := maxShownBody
		for k := 0; k < utf8.UTFMax && cut > 0 && !utf8.RuneStart(body[cut]); k++ {
			cut--
		}
		body = body[:cut]
	}
	for _, l := range strings.SplitAfter(s.text(string(body)), "\n") {
		if l != "" {
			b.WriteString("    " + strings.TrimSuffix(l, "\n") + "\n")
		}
	}
	if more := len(ch.Body) - len(body); more > 0 {
		fmt.Fprintf(b, "    (%d more bytes not shown; the whole body has the sha256 above)\n", more)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

const decideHelp = `Usage: sluice approve ID [--note TEXT] [--grant DURATION]
       sluice deny ID [--note TEXT]
       (also: sluice approvals approve|deny ID ...)

Approve or deny the waiting call with approval id ID (approver principals
only). An approval is single-use. The note is recorded in the audit ledger
with your principal, and the agent is told it in the call's result. An
approved call is decided again under the current manifest before it runs.
Nobody approves a call of its own principal. A tool with "approvers": N
needs N distinct approver principals: until the N-th approves, the call
waits on (one denial denies it).

  --grant DURATION  with approve: later calls of the same tool by the same
                    principal in the same task run without approval for
                    DURATION (e.g. 30m; 1m to 24h, whole minutes), until
                    then, a task cancel or a reload; only the approval that
                    completes the N may grant
`

func (e *env) decide(approve bool, args []string) int {
	name := "deny"
	if approve {
		name = "approve"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	note := fs.String("note", "", "")
	grantFor := fs.Duration("grant", 0, "")
	pos, code, ok := e.parse(fs, args, decideHelp)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintf(e.stderr, "sluice %s: want exactly one approval ID\n\n%s", name, decideHelp)
		return ExitUsage
	}
	d := api.ApprovalDecision{Approve: approve, Note: *note}
	if *grantFor != 0 {
		if !approve || *grantFor < time.Minute || *grantFor%time.Minute != 0 {
			fmt.Fprintf(e.stderr, "sluice %s: --grant is a whole number of minutes, with approve only (e.g. --grant 30m)\n", name)
			return ExitUsage
		}
		d.Grant = &api.GrantRequest{Minutes: int(*grantFor / time.Minute)}
	}
	c := e.client()
	defer c.Close()
	o, err := c.DecideWith(e.ctx, pos[0], d)
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice: %v\n", err)
		return ExitFailed
	}
	fmt.Fprintln(e.stdout, outcomeLine(o))
	return ExitOK
}

// outcomeLine says what a vote did: the call approved or denied, or the
// approval counted and the call waiting for more; a grant made.
func outcomeLine(o *api.ApprovalOutcome) string {
	var s screen
	switch {
	case o.Waiting:
		return fmt.Sprintf("approved %s (call %s): %d of %d approvals (%s); it waits for %d more approver principal(s)",
			s.field(o.ApprovalID), s.field(o.CallID), len(o.ApprovedBy), o.Approvers, s.field(strings.Join(o.ApprovedBy, ", ")), o.Approvers-len(o.ApprovedBy))
	case !o.Approved:
		return fmt.Sprintf("denied %s (call %s)", s.field(o.ApprovalID), s.field(o.CallID))
	}
	line := fmt.Sprintf("approved %s (call %s)", s.field(o.ApprovalID), s.field(o.CallID))
	if o.Approvers > 1 {
		line += fmt.Sprintf(" by %s", s.field(strings.Join(o.ApprovedBy, ", ")))
	}
	if g := o.Grant; g != nil {
		line += fmt.Sprintf("\ngranted %s: calls of %s by %s in task %s run without approval until %s",
			s.field(g.ID), s.field(g.Tool), s.field(g.Principal), s.field(g.Task), s.field(g.ExpiresAt))
	}
	return line
}

const tasksHelp = `Usage: sluice tasks cancel TASK
       sluice tasks list [--json]

list: the tasks sluiced remembers, yours (an approver: everyone's), with
their generation and calls in flight ("sluice tasks list --help").

cancel: cancel a task (approvers, and the principal whose task it is): its running
commands are killed, its calls waiting for approval end, a write that has
not committed does not, and new calls with the task are denied
task_cancelled for sluiced's --task-ttl (default 1 h).
`

func (e *env) tasks(args []string) int {
	if len(args) > 0 && args[0] == "list" {
		return e.tasksList(args[1:])
	}
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

// approvalWho is who a parked call is of: its principal, and the
// delegation token (a sub-agent) it was made with.
func approvalWho(a api.Approval) string {
	if a.Token == nil {
		return a.Principal
	}
	who := a.Principal + " via token " + a.Token.ID
	if a.Token.Subject != "" {
		who += " (" + a.Token.Subject + ")"
	}
	return who
}
