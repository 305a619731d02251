package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/termsafe"
)

// Exit codes.
const (
	ExitOK     = 0
	ExitFailed = 1 // allowed, but the call failed (or the audit is broken)
	ExitUsage  = 2 // bad usage or cannot reach the daemon
	ExitDenied = 3
)

const usage = `sluice — talk to sluiced, the tool-call gate for AI agents.

Usage:
  sluice [--socket PATH] COMMAND [ARGS]

Commands:
  call TOOL [--args JSON] [--task ID] [--stream] [--json] [--token-file FILE]
                      Ask sluiced to run TOOL with JSON args, e.g.
                        sluice call read_file --args '{"path":"workspace/src/main.py"}'
                      Prints the output; a denial prints its reason on stderr.
                      Exit: 0 ran ok, 3 denied, 1 allowed but failed, 2 usage/transport.
  tools [--json]      List the tools you may call, with their argument schemas.
  health              Show the daemon's status, version and policy_version.
  reload              Reload the manifest (approver principals only; SIGHUP does the same).
  approvals [--watch] List calls waiting for a human (approvers only); --watch
                      follows them as they park and are decided.
  approve ID [--note TEXT] [--grant 30m], deny ID [--note TEXT]
                      Decide a waiting call (approvers only); recorded in the audit.
  status [--json]     What sluiced is doing: calls in flight, calls waiting for
                      approval, warm pools, denials of the last 5 minutes by
                      reason (yours; an approver: everyone's).
  cancel CALL_ID      End one call in flight (yours; an approver: anyone's).
  tasks list [--json] The tasks sluiced remembers, with generation and calls in flight.
  tasks cancel TASK   Cancel a task: its commands are killed, waiting calls end,
                      no late write commits, new calls are denied task_cancelled.
  cache clear TOOL    Drop an execute tool's caches (yours; an approver: everyone's).
  budget reset PRINCIPAL
                      Give a principal its rate and denial budget back (approvers only).
  audit verify [--anchor FILE] [--head SEQ:HASH]... [--accept-truncated] [FILE]
                      Check the audit ledger's hash chain, and that it reaches
                      its anchor (and each --head). Exit 0 intact, 1 broken,
                      cut or truncated (names the first bad seq).
  replay --manifest NEW [--json] FILE
                      Re-decide every recorded decision under NEW (no filesystem
                      access) and list what would change. Exit 1 on a broken chain.
  token create --tools A,B [--roots …] [--task T] [--ttl 30m] [--peer-uid N] [--subject NAME]
  token list, token revoke ID
                      Delegation tokens: hand a sub-agent less than yourself
                      (sluice call/mcp --token-file FILE present one).
  mcp [--task ID] [--token-file FILE]
                      Serve sluiced's tools to an MCP client (Claude Code, Codex,
                      VS Code, Cursor, Gemini CLI, ...) over stdio:
                        {"command": "sluice", "args": ["mcp"]}
  init [DIR] [--format toml|json] [--output FILE] [--force] [--socket-group G]...
                      Write a commented manifest for the project in DIR (its
                      test command detected) and print what to run next.
  client setup CLIENT [--scope user|project] [--dry-run]
                      Write CLIENT's (claude, codex, gemini, cursor, vscode) MCP
                      entry for sluice and turn off its own file, shell and web tools.
  client check [CLIENT]
                      Prove a round trip through CLIENT's entry: tools listed,
                      a read, a denial; names the fix on failure.
  audit tail [-n N] [-f] [--denied] [--principal NAME] [--tool NAME] [FILE]
                      Print the last N records as readable lines (-f: keep
                      following), only those that match the filters.
                      FILE defaults to $SLUICE_AUDIT, else ` + defaultLedger + `.

Global flags:
  --socket PATH       sluiced's socket (default $SLUICE_SOCKET, else ` + api.DefaultSocket + `)
  -h, --help          This help; "sluice COMMAND --help" for a command's flags.
  --version           Print sluice's version and VCS revision.
`

// Run runs the CLI with args (without the program name) and returns the
// process exit code.
func Run(ctx context.Context, args []string) int {
	return run(ctx, args, os.Stdout, os.Stderr)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	global := flag.NewFlagSet("sluice", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	socket := global.String("socket", client.SocketFromEnv(), "")
	version := global.Bool("version", false, "")
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return ExitOK
		}
		fmt.Fprintf(stderr, "sluice: %v\n\n%s", err, usage)
		return ExitUsage
	}
	rest := global.Args()
	if *version {
		fmt.Fprintln(stdout, "sluice", api.BuildVersion())
		return ExitOK
	}
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	e := &env{ctx: ctx, socket: *socket, stdout: stdout, stderr: stderr}
	switch rest[0] {
	case "call":
		return e.call(rest[1:])
	case "tools":
		return e.tools(rest[1:])
	case "health":
		return e.health(rest[1:])
	case "reload":
		return e.reload(rest[1:])
	case "audit":
		return e.audit(rest[1:])
	case "approvals":
		return e.approvals(rest[1:])
	case "approve":
		return e.decide(true, rest[1:])
	case "deny":
		return e.decide(false, rest[1:])
	case "tasks":
		return e.tasks(rest[1:])
	case "status":
		return e.status(rest[1:])
	case "cancel":
		return e.cancel(rest[1:])
	case "cache":
		return e.cache(rest[1:])
	case "budget":
		return e.budget(rest[1:])
	case "replay":
		return e.replay(rest[1:])
	case "mcp":
		return e.mcp(rest[1:])
	case "token":
		return e.token(rest[1:])
	case "init":
		return e.initProject(rest[1:])
	case "client":
		return e.clientCmd(rest[1:])
	case "help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", rest[0], usage)
	return ExitUsage
}

type env struct {
	ctx            context.Context
	socket         string
	stdout, stderr io.Writer
}

func (e *env) client() *client.Client { return client.New(e.socket) }

// isTerminal reports whether w is a terminal (a character device), where
// what an agent controls is written escaped (termsafe).
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// safeLine is one line of agent-controlled text for a terminal or a log:
// everything a terminal would act on or not draw shown escaped.
func safeLine(s string) string {
	out, _ := termsafe.Escape(s, false)
	return out
}

// parse parses flags that may come before or after positional arguments.
func (e *env) parse(fs *flag.FlagSet, args []string, help string) ([]string, int, bool) {
	fs.SetOutput(io.Discard)
	fs.StringVar(&e.socket, "socket", e.socket, "sluiced's socket")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(e.stdout, help)
				return nil, ExitOK, false
			}
			fmt.Fprintf(e.stderr, "sluice %s: %v\n\n%s", fs.Name(), err, help)
			return nil, ExitUsage, false
		}
		if fs.NArg() == 0 {
			return pos, 0, true
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

const callHelp = `Usage: sluice call TOOL [--args JSON] [--task ID] [--stream] [--json] [--token-file FILE]

Ask sluiced to run TOOL. The daemon decides from its manifest and your
peer credentials; the request cannot name who you are.

  --args JSON   the tool's arguments (default {}), e.g. '{"path":"workspace/src/a.py"}'
  --task ID     a task id, recorded in the audit (cancel and revalidation use it)
  --stream      print output as it arrives (NDJSON events from the daemon); a call
                that needs approval prints its approval id on stderr at once
  --json        print the whole result as JSON instead of the output
  --token-file FILE
                present the delegation token in FILE (not readable by others):
                the call has the token's rights, never your own

Exit: 0 allowed and ok, 3 denied, 1 allowed but failed, 2 usage or transport.
`

func (e *env) call(args []string) int {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	argsJSON := fs.String("args", "{}", "")
	task := fs.String("task", "", "")
	stream := fs.Bool("stream", false, "")
	asJSON := fs.Bool("json", false, "")
	tokenFile := fs.String("token-file", "", "")
	pos, code, ok := e.parse(fs, args, callHelp)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintf(e.stderr, "sluice call: want exactly one TOOL, got %d arguments\n\n%s", len(pos), callHelp)
		return ExitUsage
	}
	if !json.Valid([]byte(*argsJSON)) {
		fmt.Fprintf(e.stderr, "sluice call: --args is not valid JSON: %s\n", *argsJSON)
		return ExitUsage
	}
	c, ok := e.tokenClient("call", *tokenFile)
	if !ok {
		return ExitUsage
	}
	defer c.Close()
	req := api.CallRequest{Tool: pos[0], Args: json.RawMessage(*argsJSON), Task: *task}
	// What the call returns is the agent's world (a file, a command's
	// output, a web page): to a terminal it goes escaped, so that nothing
	// in it can act on the terminal or hide itself (docs/security.md, "The
	// third review"); to a pipe or a file, as it is.
	stdout, stderr := io.Writer(e.stdout), io.Writer(e.stderr)
	var tout, terr *termsafe.Writer
	if !*asJSON {
		if isTerminal(e.stdout) {
			tout = termsafe.NewWriter(e.stdout)
			stdout = tout
		}
		if isTerminal(e.stderr) {
			terr = termsafe.NewWriter(e.stderr)
			stderr = terr
		}
	}
	finished := false
	finish := func() {
		if finished {
			return
		}
		finished = true
		hidden := 0
		for _, w := range []*termsafe.Writer{tout, terr} {
			if w != nil {
				w.Flush()
				hidden += w.Hidden
			}
		}
		if hidden > 0 {
			fmt.Fprintf(e.stderr, "\nsluice: ! the output contains %d control/invisible characters, shown escaped (redirect it to a file to see it as it is)\n", hidden)
		}
	}
	defer finish()
	var res *api.CallResult
	var err error
	if *stream {
		res, err = c.Stream(e.ctx, req, func(ev api.Event) error {
			if *asJSON {
				fmt.Fprintln(e.stdout, string(ev.Raw))
				return nil
			}
			if ev.Event == api.EventDecision && ev.Verdict == api.VerdictPending {
				fmt.Fprintln(e.stderr, pendingLine(&ev))
			}
			if ev.Event == api.EventOutput {
				w := stdout
				if ev.Stream == "stderr" {
					w = stderr
				}
				if ev.DataB64 != "" {
					b, _ := base64.StdEncoding.DecodeString(ev.DataB64)
					w.Write(b)
				} else {
					io.WriteString(w, ev.Data)
				}
			}
			return nil
		})
	} else if isTerminal(e.stderr) {
		// Never silent: a call that waits for a human says so at once.
		res, err = callTelling(e.ctx, c, req, e.stderr)
	} else {
		res, err = c.Call(e.ctx, req)
	}
	if err != nil {
		return e.transportErr(err)
	}
	if *asJSON && !*stream {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(res)
	} else if !*stream {
		if res.OutputB64 != "" {
			b, _ := base64.StdEncoding.DecodeString(res.OutputB64)
			stdout.Write(b)
		} else if res.Output != nil {
			io.WriteString(stdout, *res.Output)
		}
		if res.Stderr != "" {
			io.WriteString(stderr, res.Stderr)
		}
	}
	finish()
	if !*asJSON {
		printChangeset(e.stderr, res)
		printApprovalNote(e.stderr, res)
	}
	switch {
	case res.Verdict != api.VerdictAllow:
		if !*asJSON {
			fmt.Fprintln(e.stderr, denialLine(res))
		}
		return ExitDenied
	case !res.OK:
		if !*asJSON {
			msg := "sluice: failed: " + string(res.Reason)
			switch {
			case res.Reason == api.ReasonAllowed && res.ExitCode != nil:
				msg = fmt.Sprintf("sluice: command exited with code %d", *res.ExitCode)
			case res.ExitCode != nil:
				msg += fmt.Sprintf(" (exit code %d)", *res.ExitCode)
			}
			fmt.Fprintln(e.stderr, msg)
		}
		return ExitFailed
	}
	if res.Truncated && !*asJSON {
		fmt.Fprintf(e.stderr, "\nsluice: output truncated at %d bytes (max_bytes)\n", res.Bytes)
	}
	if res.Redacted > 0 && !*asJSON {
		fmt.Fprintf(e.stderr, "sluice: %d secret(s) replaced by [REDACTED:kind] (redact)\n", res.Redacted)
	}
	return ExitOK
}

const toolsHelp = `Usage: sluice tools [--json]

List the tools sluiced lets you call. --json prints them with their
argument schemas, ready to hand to a model as function definitions.
`

func (e *env) tools(args []string) int {
	fs := flag.NewFlagSet("tools", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "")
	pos, code, ok := e.parse(fs, args, toolsHelp)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		fmt.Fprint(e.stderr, toolsHelp)
		return ExitUsage
	}
	c := e.client()
	defer c.Close()
	t, err := c.Tools(e.ctx)
	if err != nil {
		return e.transportErr(err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(t)
		return ExitOK
	}
	if len(t.Tools) == 0 {
		fmt.Fprintln(e.stderr, "sluice: no tools for you (is your uid mapped to a principal in the manifest?)")
		return ExitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tOPERATION\tDESCRIPTION")
	for _, tool := range t.Tools {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", tool.Name, tool.Operation, tool.Description)
	}
	tw.Flush()
	return ExitOK
}

func (e *env) health(args []string) int {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	if _, code, ok := e.parse(fs, args, "Usage: sluice health\n\nShow sluiced's status, version and policy_version.\n"); !ok {
		return code
	}
	c := e.client()
	defer c.Close()
	h, err := c.Health(e.ctx)
	if err != nil {
		return e.transportErr(err)
	}
	fmt.Fprintf(e.stdout, "status %s\nversion %s\npolicy_version %s\n", h.Status, h.Version, h.PolicyVersion)
	return ExitOK
}

func (e *env) reload(args []string) int {
	fs := flag.NewFlagSet("reload", flag.ContinueOnError)
	if _, code, ok := e.parse(fs, args, "Usage: sluice reload\n\nReload sluiced's manifest (approver principals only). An invalid\nmanifest is refused and the current one stays in force.\n"); !ok {
		return code
	}
	c := e.client()
	defer c.Close()
	h, err := c.Reload(e.ctx)
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice: %v\n", err)
		return ExitFailed
	}
	fmt.Fprintf(e.stdout, "reloaded: policy_version %s\n", h.PolicyVersion)
	return ExitOK
}

const auditHelp = `Usage:
  sluice audit verify [--anchor FILE] [--head SEQ:HASH]... [--accept-truncated] [FILE]
                                  check the hash chain and that the ledger reaches its
                                  anchor and each --head; exit 0 intact, 1 broken or cut
  sluice audit tail [-n N] [-f] [--denied] [--principal NAME] [--tool NAME] [FILE]
                                  print the last N records (default 20) that match the
                                  filters; -f follows

FILE is the ledger, sluiced's STATE_DIR/audit.jsonl. Without FILE: $SLUICE_AUDIT
when set, else ` + defaultLedger + ` (sluiced's default --state-dir).
`

func (e *env) audit(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) == 0 {
			fmt.Fprint(e.stderr, auditHelp)
			return ExitUsage
		}
		fmt.Fprint(e.stdout, auditHelp)
		return ExitOK
	}
	switch args[0] {
	case "verify":
		return e.auditVerify(args[1:])
	case "tail":
		return e.auditTail(args[1:])
	}
	fmt.Fprintf(e.stderr, "sluice audit: unknown subcommand %q\n\n%s", args[0], auditHelp)
	return ExitUsage
}
