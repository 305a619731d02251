package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/scaffold"
)

const initHelp = `Usage: sluice init [DIR] [--format toml|json] [--output FILE] [--force]
                   [--agent USER] [--socket-group GROUP]... [--install]

Write a commented manifest for the project in DIR (default: the current
directory), detect its test command, and print what to run next.

The manifest lets the agent read, list and search the project (base = DIR,
roots ".", secrets such as .env, *.pem and id_rsa never shown), edit and
write files only with a human's approval, and run the project's tests in a
container: Go (go.mod: go test with patterns for packages and -run), Python
(pyproject.toml, setup.py, pytest.ini, tests/...: python3 -m pytest with a
test path, -k and flags, or python3 -m unittest), Node (package.json with a
"test" script: npm test). What a test run changes in the project is shown
to an approver and written only if approved. Build caches are written
commented out: they need Linux 6.3 or later.

  --format toml|json  toml (default) keeps a comment on every key; json has
                      none, so they are printed instead
  --output FILE       where to write it (default: $XDG_CONFIG_HOME/sluice/NAME.toml,
                      ~/.config/sluice/NAME.toml; NAME is DIR's name). Never
                      inside DIR: sluiced refuses a manifest that a write tool
                      could rewrite. The extension says the format: .toml is
                      TOML, anything else JSON
  --force             replace FILE if it exists (never without it)
  --agent USER        the user (or uid) the agent runs as (default: the user
                      who ran sudo, else you); root approves
  --socket-group G    members of group G are the agent too (repeatable)
  --install           as root, also do what it would print next: check the
                      manifest with sluiced --check, install it where the
                      service reads it (/etc/sluice/manifest.toml or .json;
                      one already there is kept beside it), write a systemd
                      drop-in letting the service see and change DIR,
                      restart the service (or start its socket), and add
                      the agent's user to group sluice. Then only the
                      client is left: sluice client setup, as the agent

Exit: 0 written, 1 could not write, 2 usage.
`

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func (e *env) initProject(args []string) int {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	format := fs.String("format", "", "toml or json")
	output := fs.String("output", "", "the manifest file")
	force := fs.Bool("force", false, "replace an existing file")
	agent := fs.String("agent", "", "the agent's user or uid")
	install := fs.Bool("install", false, "install it for the service")
	var groups multi
	fs.Var(&groups, "socket-group", "a group whose members are the agent too")
	pos, code, ok := e.parse(fs, args, initHelp)
	if !ok {
		return code
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(e.stderr, "sluice init: "+format+"\n", a...)
		return ExitUsage
	}
	if len(pos) > 1 {
		return fail("one DIR at most, got %d: %s", len(pos), strings.Join(pos, " "))
	}
	dir := "."
	if len(pos) == 1 {
		dir = pos[0]
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fail("%v", err)
	}
	switch st, err := os.Stat(dir); {
	case errors.Is(err, os.ErrNotExist):
		return fail("%s does not exist; create it (mkdir -p %s) or name your project's directory", dir, dir)
	case err != nil:
		return fail("%v", err)
	case !st.IsDir():
		return fail("%s is not a directory; name the project's directory (sluice init DIR)", dir)
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		// base is named as the kernel names it: a root reached through
		// a symlink is refused at load when never globs are set.
		dir = real
	}

	f := scaffold.TOML
	if *format != "" {
		if f, err = scaffold.ParseFormat(*format); err != nil {
			return fail("%v", err)
		}
	}
	out := *output
	if out != "" {
		out, err = filepath.Abs(out)
		if err != nil {
			return fail("%v", err)
		}
		byExt := scaffold.JSON
		if strings.EqualFold(filepath.Ext(out), ".toml") {
			byExt = scaffold.TOML
		}
		switch {
		case *format == "":
			f = byExt
		case f != byExt:
			return fail("--output %s would be read as %s (sluiced goes by the extension: .toml is TOML, anything else JSON); name it %s or drop --format", out, byExt, strings.TrimSuffix(out, filepath.Ext(out))+f.Ext())
		}
	} else if out, err = scaffold.DefaultOutput(dir, f); err != nil {
		return fail("no default place for the manifest (%v); name one with --output FILE", err)
	}
	if scaffold.Inside(out, dir) {
		return fail("%s lies inside %s: the manifest's write tools could rewrite it, and sluiced refuses such a manifest; write it elsewhere, e.g. --output /etc/sluice/manifest%s", out, dir, f.Ext())
	}

	if *install && os.Geteuid() != 0 {
		return fail("%v", scaffold.ErrNotRoot)
	}
	uid, name, err := agentUser(*agent)
	if err != nil {
		return fail("%v", err)
	}
	var gs []scaffold.Group
	for _, g := range groups {
		grp, err := lookupGroup(g)
		if err != nil {
			return fail("--socket-group %s: %v", g, err)
		}
		gs = append(gs, grp)
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	res, err := scaffold.Generate(scaffold.Options{Dir: dir, Format: f, AgentUID: uid, AgentName: name, Groups: gs, Kernel: kernel})
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice init: %v\n", err)
		return ExitFailed
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		fmt.Fprintf(e.stderr, "sluice init: %v; name another place with --output FILE\n", err)
		return ExitFailed
	}
	if err := scaffold.WriteFile(out, res.Data, *force); err != nil {
		if errors.Is(err, scaffold.ErrExists) {
			fmt.Fprintf(e.stderr, "sluice init: %s already exists; use --force to replace it, or --output FILE to write another\n", out)
			return ExitFailed
		}
		fmt.Fprintf(e.stderr, "sluice init: write %s: %v\n", out, err)
		return ExitFailed
	}

	fmt.Fprintf(e.stdout, "Wrote %s: a manifest for %s\n", out, dir)
	fmt.Fprintf(e.stdout, "  tools: %s\n", strings.Join(res.Tools, ", "))
	for _, p := range res.Projects {
		fmt.Fprintf(e.stdout, "  found %s (%s): %s\n", p.Kind, p.Marker, testSummary(p))
	}
	for _, n := range res.Notes {
		fmt.Fprintf(e.stdout, "  note: %s\n", n)
	}
	if len(res.Explain) > 0 {
		fmt.Fprintln(e.stdout, "\nWhat each key means (JSON has no comments; --format toml writes them into the file):")
		for _, l := range res.Explain {
			fmt.Fprintf(e.stdout, "  %s\n", l)
		}
	}
	agentName := name
	if agentName == "" {
		agentName = strconv.FormatUint(uint64(uid), 10)
	}
	// The service's socket is group sluice's (scripts/sluiced.socket; a
	// daemon started by hand chowns it to sluice when that group exists).
	sock := "sluice"
	_, gerr := user.LookupGroup(sock)
	next := scaffold.Next{Manifest: out, Dir: dir, Format: f, Agent: agentName, AgentIsRoot: uid == 0,
		SocketGroup: sock, SocketGroupExists: gerr == nil}
	fmt.Fprintln(e.stdout)
	if *install {
		fmt.Fprintln(e.stdout, "Installing it for the service (--install):")
		_, serr := os.Stat("/run/systemd/system")
		in := &scaffold.Install{Manifest: out, Dir: dir, Format: f, Agent: name, AgentUID: uid, Out: e.stdout, Systemd: serr == nil}
		if err := in.Do(); err != nil {
			fmt.Fprintf(e.stderr, "sluice init --install: %v\n", err)
			return ExitFailed
		}
		fmt.Fprintln(e.stdout)
		fmt.Fprint(e.stdout, scaffold.InstalledNext(next))
		return ExitOK
	}
	fmt.Fprint(e.stdout, scaffold.NextSteps(next))
	return ExitOK
}

func testSummary(p scaffold.Project) string {
	switch p.Kind {
	case scaffold.Go:
		return "go test"
	case scaffold.Python:
		if p.Pytest {
			return "python3 -m pytest (and python3 -m unittest)"
		}
		return "python3 -m unittest (and python3 -m pytest)"
	case scaffold.Node:
		return "npm test"
	}
	return ""
}

// agentUser is the uid the agent runs as: --agent, else the user who ran
// sudo, else the invoker.
func agentUser(flagVal string) (uint32, string, error) {
	s := flagVal
	if s == "" && os.Getuid() == 0 {
		s = os.Getenv("SUDO_UID")
	}
	if s == "" {
		uid := os.Getuid()
		if uid < 0 { // not a unix system
			return 0, "", errors.New("no uid here; name the agent's uid with --agent UID")
		}
		name := ""
		if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
			name = u.Username
		}
		return uint32(uid), name, nil
	}
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		name := ""
		if u, err := user.LookupId(s); err == nil {
			name = u.Username
		}
		return uint32(n), name, nil
	}
	u, err := user.Lookup(s)
	if err != nil {
		return 0, "", fmt.Errorf("--agent %s: no such user; name an existing user or a uid", s)
	}
	n, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return 0, "", fmt.Errorf("--agent %s: uid %q is not a number", s, u.Uid)
	}
	return uint32(n), u.Username, nil
}

func lookupGroup(s string) (scaffold.Group, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		name := s
		if g, err := user.LookupGroupId(s); err == nil {
			name = g.Name
		}
		return scaffold.Group{Name: name, GID: uint32(n)}, nil
	}
	g, err := user.LookupGroup(s)
	if err != nil {
		return scaffold.Group{}, fmt.Errorf("no such group; create it (sudo groupadd --system %s) or name an existing one", s)
	}
	n, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return scaffold.Group{}, fmt.Errorf("gid %q is not a number", g.Gid)
	}
	return scaffold.Group{Name: g.Name, GID: uint32(n)}, nil
}
