package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/clientsetup"
	"github.com/sluicehq/sluice/internal/udiff"
)

const clientHelp = `Usage: sluice client setup CLIENT [--scope user|project] [--dir DIR] [--socket PATH] [--dry-run]
       sluice client check [CLIENT] [--scope user|project] [--dir DIR] [--socket PATH] [--read PATH]

Wire an agent to sluiced. CLIENT is one of: claude, codex, gemini, cursor, vscode.

setup   Writes CLIENT's MCP entry for sluice,
          {"command": "<this sluice>", "args": ["mcp", "--socket", PATH]}
        (the socket in the args: some clients pass MCP servers no environment),
        and turns off the client's own file, shell and web tools by the names
        of the client version they were checked at, so that the agent uses
        sluice's. Handles folder trust where the client needs it. Merges into
        the existing files (the original kept once as FILE.bak); a file that
        does not parse is refused, named with its line. Running it twice
        changes nothing the second time. Prints what it wrote, what it turned
        off, and what is left to do by hand.
          --scope    user (the user's own config; the default, but project for
                     cursor and vscode) or project (DIR's, for the team)
          --dir      the project directory (default: the current directory)
          --socket   sluiced's socket written into the entry (default: the
                     global --socket, $SLUICE_SOCKET, else ` + api.DefaultSocket + `)
          --dry-run  print the changes as diffs; write nothing

check   Proves a round trip as this user through the path the client uses:
        starts the entry read back from CLIENT's config (without CLIENT:
        this sluice with --socket) with an empty environment, as Codex does;
        MCP initialize, tools/list, one allowed read (--read PATH, or a file
        found by the list tool), one read that must be denied. Names the fix
        on failure. Exit 0 ok, 1 failed, 2 usage.

See docs/clients.md for what each client gets.
`

// clientCmd is `sluice client setup|check`.
func (e *env) clientCmd(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, clientHelp)
		return ExitUsage
	}
	switch args[0] {
	case "setup":
		return e.clientSetup(args[1:])
	case "check":
		return e.clientCheck(args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(e.stdout, clientHelp)
		return ExitOK
	}
	fmt.Fprintf(e.stderr, "sluice client: unknown subcommand %q\n\n%s", args[0], clientHelp)
	return ExitUsage
}

// clientOptions parses the flags setup and check share.
type clientFlags struct {
	scope, dir, read string
	dryRun           bool
}

func (e *env) clientFlags(name string, args []string, withDry bool) (*clientFlags, []string, int, bool) {
	fs := flag.NewFlagSet("client "+name, flag.ContinueOnError)
	f := &clientFlags{}
	fs.StringVar(&f.scope, "scope", "", "user or project")
	fs.StringVar(&f.dir, "dir", "", "the project directory")
	if withDry {
		fs.BoolVar(&f.dryRun, "dry-run", false, "write nothing")
	} else {
		fs.StringVar(&f.read, "read", "", "a file the read tool may read")
	}
	pos, code, ok := e.parse(fs, args, clientHelp)
	return f, pos, code, ok
}

func (e *env) options(f *clientFlags) (clientsetup.Options, error) {
	o := clientsetup.Options{Scope: clientsetup.Scope(f.scope), Socket: e.socket}
	if o.Scope != "" && o.Scope != clientsetup.ScopeUser && o.Scope != clientsetup.ScopeProject {
		return o, fmt.Errorf("--scope %q: want user or project", f.scope)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return o, fmt.Errorf("no home directory: %v (set $HOME)", err)
	}
	o.Home = home
	dir := f.dir
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return o, err
		}
	}
	if o.Dir, err = filepath.Abs(dir); err != nil {
		return o, err
	}
	if o.Socket == "" {
		o.Socket = api.DefaultSocket
	}
	if o.Socket, err = filepath.Abs(o.Socket); err != nil {
		return o, err
	}
	o.Command = selfCommand()
	return o, nil
}

// selfCommand is how a client should start this sluice: "sluice" when
// that is what $PATH finds, else this binary's absolute path.
func selfCommand() string {
	self, err := os.Executable()
	if err != nil {
		return "sluice"
	}
	if r, err := filepath.EvalSymlinks(self); err == nil {
		self = r
	}
	if p, err := exec.LookPath("sluice"); err == nil {
		a, err1 := os.Stat(p)
		b, err2 := os.Stat(self)
		if err1 == nil && err2 == nil && os.SameFile(a, b) {
			return "sluice"
		}
	}
	return self
}

func lookupClient(name string) (*clientsetup.Client, error) {
	c, ok := clientsetup.Clients[name]
	if !ok {
		return nil, fmt.Errorf("unknown client %q: want one of %s", name, strings.Join(clientsetup.Names(), ", "))
	}
	return c, nil
}

func (e *env) clientSetup(args []string) int {
	f, pos, code, ok := e.clientFlags("setup", args, true)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintf(e.stderr, "sluice client setup: name one client (%s)\n\n%s", strings.Join(clientsetup.Names(), ", "), clientHelp)
		return ExitUsage
	}
	c, err := lookupClient(pos[0])
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice client setup: %v\n", err)
		return ExitUsage
	}
	o, err := e.options(f)
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice client setup: %v\n", err)
		return ExitUsage
	}
	p, err := c.Setup(o)
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice client setup %s: %v\n", c.Name, err)
		return ExitFailed
	}
	out := e.stdout
	fmt.Fprintf(out, "%s (%s scope; names checked at %s): sluice's entry runs %s %s\n", c.Title, p.Scope, c.Checked,
		o.Command, strings.Join(o.Args(), " "))
	if f.dryRun {
		for _, ch := range p.Changes {
			oldName := ch.Path
			if ch.Old == nil {
				oldName = ""
			}
			d, _, tooLarge := udiff.Unified(oldName, ch.Path, string(ch.Old), string(ch.New))
			if tooLarge {
				d = fmt.Sprintf("would rewrite %s (too large to show as a diff)\n", ch.Path)
			}
			fmt.Fprint(out, d)
		}
		for _, u := range p.Unchanged {
			fmt.Fprintf(out, "unchanged: %s\n", u)
		}
		fmt.Fprintln(out, "dry run: nothing written")
		return ExitOK
	}
	if err := p.Apply(); err != nil {
		fmt.Fprintf(e.stderr, "sluice client setup %s: %v\n", c.Name, err)
		return ExitFailed
	}
	for _, ch := range p.Changes {
		if ch.Old == nil {
			fmt.Fprintf(out, "wrote %s (new)\n", ch.Path)
		} else {
			fmt.Fprintf(out, "wrote %s (the original is in %s.bak)\n", ch.Path, ch.Path)
		}
	}
	for _, u := range p.Unchanged {
		fmt.Fprintf(out, "unchanged: %s (already set up)\n", u)
	}
	if len(p.Disabled) > 0 {
		fmt.Fprintf(out, "turned off %s's own tools: %s\n", c.Title, strings.Join(p.Disabled, ", "))
	}
	manual := p.Manual
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	if _, err := client.New(o.Socket).Health(ctx); err != nil {
		manual = append(manual, strings.TrimPrefix(transportHint(o.Socket, err), "sluice: "))
	}
	for _, m := range manual {
		fmt.Fprintf(out, "to do by hand: %s\n", m)
	}
	fmt.Fprintf(out, "then: sluice client check %s", c.Name)
	if p.Scope != c.DefaultScope {
		fmt.Fprintf(out, " --scope %s", p.Scope)
	}
	fmt.Fprintln(out)
	return ExitOK
}

func (e *env) clientCheck(args []string) int {
	f, pos, code, ok := e.clientFlags("check", args, false)
	if !ok {
		return code
	}
	if len(pos) > 1 {
		fmt.Fprint(e.stderr, clientHelp)
		return ExitUsage
	}
	o, err := e.options(f)
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice client check: %v\n", err)
		return ExitUsage
	}
	command, cargs := o.Command, o.Args()
	what := "sluice " + strings.Join(cargs, " ")
	if len(pos) == 1 {
		c, err := lookupClient(pos[0])
		if err != nil {
			fmt.Fprintf(e.stderr, "sluice client check: %v\n", err)
			return ExitUsage
		}
		if o.Scope == "" {
			o.Scope = c.DefaultScope
		}
		file, cmd, a, err := c.Entry(o)
		if err != nil {
			fmt.Fprintf(e.stderr, "FAIL %s: %v. Fix: `sluice client setup %s --scope %s`.\n", c.Title, err, c.Name, o.Scope)
			return ExitFailed
		}
		command, cargs = cmd, a
		what = fmt.Sprintf("%s's entry in %s: %s %s", c.Title, file, cmd, strings.Join(a, " "))
	}
	fmt.Fprintf(e.stdout, "starting %s (empty environment, uid %d)\n", what, os.Getuid())
	socket := o.Socket
	if i := slices.Index(cargs, "--socket"); i >= 0 && i+1 < len(cargs) {
		socket = cargs[i+1]
	} else if len(pos) == 1 {
		fmt.Fprintf(e.stdout, "warning: the entry has no --socket: clients that pass no environment reach only %s\n", api.DefaultSocket)
		socket = api.DefaultSocket
	}
	if err := e.roundTrip(command, cargs, socket, f.read); err != nil {
		fmt.Fprintf(e.stderr, "FAIL %v\n", err)
		return ExitFailed
	}
	fmt.Fprintln(e.stdout, "ok: the agent reaches sluiced through sluice's MCP entry")
	return ExitOK
}

// roundTrip runs the MCP bridge as the client would and proves it.
func (e *env) roundTrip(command string, args []string, socket, readPath string) error {
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	// The fix when the daemon cannot be reached, in the CLI's words.
	fix := func(stage string, err error) error {
		hctx, hcancel := context.WithTimeout(e.ctx, 5*time.Second)
		defer hcancel()
		if _, herr := client.New(socket).Health(hctx); herr != nil {
			return fmt.Errorf("%s: %v\n%s", stage, err, transportHint(socket, herr))
		}
		return fmt.Errorf("%s: %v", stage, err)
	}
	cmd := exec.Command(command, args...)
	cmd.Env = []string{} // as Codex and the MCP Inspector start MCP servers
	stderr := &limitedWriter{n: 8 << 10}
	cmd.Stderr = stderr
	c := sdk.NewClient(&sdk.Implementation{Name: "sluice-client-check", Version: api.BuildVersion()}, nil)
	cs, err := c.Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("initialize: cannot start %s: %v (is sluice installed there? `sluice client setup CLIENT` writes this binary's path)", command, err)
		}
		return fix("initialize", fmt.Errorf("%v\n%s", err, stderr))
	}
	defer cs.Close()
	fmt.Fprintf(e.stdout, "ok initialize: %s %s\n", cs.InitializeResult().ServerInfo.Name, cs.InitializeResult().ServerInfo.Version)
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		return fix("tools/list", err)
	}
	if len(lt.Tools) == 0 {
		return errors.New("tools/list: no tools: the manifest gives this user none (check its principals' uids/gids)")
	}
	var names []string
	for _, t := range lt.Tools {
		names = append(names, t.Name)
	}
	fmt.Fprintf(e.stdout, "ok tools/list: %d tools (%s)\n", len(names), strings.Join(names, ", "))
	read := pickTool(lt.Tools, "read")
	if read == "" {
		fmt.Fprintln(e.stdout, "skip read and denial: no read-only tool with a path argument is offered")
		return nil
	}
	// A read outside every root: must be denied, with a reason.
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: read, Arguments: map[string]any{"path": "/etc/shadow"}})
	if err != nil {
		return fix("denied call", err)
	}
	if !res.IsError {
		return fmt.Errorf("denied call: %s of /etc/shadow was allowed: the manifest's roots include /etc", read)
	}
	fmt.Fprintf(e.stdout, "ok denial: %s /etc/shadow → %s\n", read, firstLine(resultText(res)))
	if readPath == "" {
		readPath = e.findFile(ctx, cs, lt.Tools, read)
	}
	if readPath == "" {
		fmt.Fprintf(e.stdout, "skip read: the list tool found no file under the read tool's roots; name one with --read PATH\n")
		return nil
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: read, Arguments: map[string]any{"path": readPath}})
	if err != nil {
		return fix("read", err)
	}
	if res.IsError {
		return fmt.Errorf("read: %s %s was denied: %s (paths start at the manifest's base; pick a file under %s's roots)", read, readPath, firstLine(resultText(res)), read)
	}
	fmt.Fprintf(e.stdout, "ok read: %s %s (%d bytes)\n", read, readPath, len(resultText(res)))
	return nil
}

// pickTool is the name of a read-only tool whose name says op and that
// takes a path ("read_file" first), or "".
func pickTool(tools []*sdk.Tool, op string) string {
	best := ""
	for _, t := range tools {
		if t.Annotations == nil || !t.Annotations.ReadOnlyHint || !strings.Contains(t.Name, op) {
			continue
		}
		schema, _ := json.Marshal(t.InputSchema)
		var s struct {
			Properties map[string]any `json:"properties"`
		}
		if json.Unmarshal(schema, &s) != nil || s.Properties["path"] == nil {
			continue
		}
		if t.Name == op+"_file" || t.Name == op+"_dir" {
			return t.Name
		}
		if best == "" {
			best = t.Name
		}
	}
	return best
}

// rootsRE reads a file tool's roots from its path argument's
// description (authz/op.go: "beneath one of: ROOT, ROOT (e.g. ...").
var rootsRE = regexp.MustCompile(`beneath one of: (.*?) \(e\.g\.`)

// roots are the roots tool t names in its path description.
func roots(t *sdk.Tool) []string {
	schema, _ := json.Marshal(t.InputSchema)
	var s struct {
		Properties struct {
			Path struct {
				Description string `json:"description"`
			} `json:"path"`
		} `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return nil
	}
	m := rootsRE.FindStringSubmatch(s.Properties.Path.Description)
	if m == nil {
		return nil
	}
	return strings.Split(m[1], ", ")
}

// findFile is a file beneath one of the read tool's roots, found with
// the list tool (the roots read from the tools' descriptions, else "."),
// or "".
func (e *env) findFile(ctx context.Context, cs *sdk.ClientSession, tools []*sdk.Tool, read string) string {
	list := pickTool(tools, "list")
	if list == "" {
		return ""
	}
	dirs := []string{"."}
	for _, t := range tools {
		if t.Name == read {
			if r := roots(t); len(r) > 0 {
				dirs = r
			}
		}
	}
	for _, dir := range dirs {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: list, Arguments: map[string]any{"path": dir}})
		if err != nil || res.IsError {
			continue
		}
		for _, line := range strings.Split(resultText(res), "\n") {
			var en api.Entry
			if json.Unmarshal([]byte(line), &en) == nil && en.Type == "file" && en.Name != "" && !strings.HasPrefix(en.Name, ".") {
				return path.Join(dir, en.Name)
			}
		}
	}
	return ""
}

func resultText(r *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return safeLine(s)
}

// limitedWriter keeps the first n bytes written (the bridge's stderr,
// written by exec's goroutine while the check reads it).
type limitedWriter struct {
	mu sync.Mutex
	b  strings.Builder
	n  int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n > 0 {
		k := min(len(p), l.n)
		l.b.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

func (l *limitedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
