package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/termsafe"
)

const approvalsHelp = `Usage: sluice approvals [--watch] [--json]

List the calls waiting for a human (approver principals only): approval
id, who asked, the tool, its args (file bodies appear as digests) and when
the approval expires, then what each call would do, as its operation shows
it: a post's method, whole URL and body (the first 4 KiB, its size and
sha256); a fetch's method and URL; a write's path, the file as it is now
and a unified diff of the new content against it (binary or very large
content: sizes and sha256 digests only); a delete's path and the file's
size and digest; a command's argv. Decide one with "sluice approve ID" or
"sluice deny ID". An approved write writes the content whose digest is
shown, an approved post sends the body whose digest is shown; the file
itself is checked again (its if_match) only when the write commits.

Everything shown comes from the agent. Control characters, escape
sequences, bidi overrides, zero-width and other invisible characters and
invalid UTF-8 are never written to the terminal: they are shown escaped
(\r, \x1b, \u202e, \xff), and a change that holds any says so first:
  ! this change contains 3 control/invisible characters, shown escaped
With no such line, every backslash shown is in the content itself.

  --watch   keep listing: print each new waiting call as it arrives (Ctrl-C stops)
  --json    print JSON (strings as the daemon sent them: not for a terminal)
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
			shown := make([]screen, len(fresh))
			for i, a := range fresh {
				s := &shown[i]
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.field(a.ApprovalID), s.field(a.Principal), s.field(a.Tool),
					s.field(string(a.Args)), s.field(dash(a.Task)), s.field(a.ExpiresAt))
			}
			tw.Flush()
			for i, a := range fresh {
				printChange(e.stdout, a, &shown[i])
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
	fmt.Fprintf(w, "\n%s (%s, %s) %s:\n", s.field(a.ApprovalID), s.field(a.Principal), s.field(a.Tool), verb)
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
