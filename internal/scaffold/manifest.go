package scaffold

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Format is how the manifest is written.
type Format string

const (
	TOML Format = "toml"
	JSON Format = "json"
)

// ParseFormat reads --format.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "toml":
		return TOML, nil
	case "json":
		return JSON, nil
	}
	return "", fmt.Errorf("--format %q: use toml (the default: it keeps the comments) or json", s)
}

// Ext is the file extension sluiced reads the format by.
func (f Format) Ext() string { return "." + string(f) }

// Group is a group whose members are the agent too (--socket-group).
type Group struct {
	Name string
	GID  uint32
}

// Options say what to write.
type Options struct {
	// Dir is the project: absolute and clean. It becomes base.
	Dir    string
	Format Format
	// AgentUID is the uid the agent runs as; AgentName its user name
	// (for comments), may be empty.
	AgentUID  uint32
	AgentName string
	// Groups: members are the agent too (principals.agent.gids).
	Groups []Group
	// Kernel is the running kernel's release (uname -r), for the caches'
	// comment; empty when unknown.
	Kernel string
	// LookPath finds a program on the invoker's PATH (exec.LookPath when
	// nil); Exists tells whether a host file exists (os.Stat when nil).
	LookPath func(string) (string, error)
	Exists   func(string) bool
	// Glob is filepath.Glob when nil (to look for pytest where the
	// system's python3 finds it).
	Glob func(string) ([]string, error)
}

// Result is a generated manifest.
type Result struct {
	Data []byte
	// Projects are the test commands written (possibly none).
	Projects []Project
	// Tools are the tool names, in the order written.
	Tools []string
	// Notes are things the invoker should know (a toolchain the sandbox
	// cannot see, a package.json without tests, an agent that is root).
	Notes []string
	// Explain is, for JSON, each key's comment: printed, since JSON has
	// no comments.
	Explain []string
}

// sandboxPath is the PATH a command's container gets
// (sandbox.DefaultPath; a test holds them equal); its directories, with
// /usr, /bin, /sbin, /lib and /lib64, are what the container shows of the
// host beside its mounts.
const sandboxPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// visibleInSandbox reports whether a host path lies in what every
// container shows read-only (docs/sandbox.md).
func visibleInSandbox(p string) bool {
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib64"} {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// secrets are never-listed for every tool: names and globs of files an
// agent has no business reading (docs/manifest.md, never).
var secrets = []string{".env", ".env.*", "*.pem", "*.key", "*.p12", "*.pfx", "id_rsa*", "id_ecdsa*", "id_ed25519*", ".netrc", ".npmrc", ".pypirc", ".git-credentials", "secrets/**"}

// writeNever adds what no write may change: the repository's history and
// hooks (a hook written into .git/hooks runs on your next commit).
var writeNever = append(append([]string{}, secrets...), ".git")

// Generate builds the manifest for o.Dir.
func Generate(o Options) (*Result, error) {
	if !filepath.IsAbs(o.Dir) || filepath.Clean(o.Dir) != o.Dir {
		return nil, errors.New("scaffold: Dir must be absolute and clean")
	}
	if o.Format == "" {
		o.Format = TOML
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	if o.Glob == nil {
		o.Glob = filepath.Glob
	}
	if o.Exists == nil {
		o.Exists = func(p string) bool { _, err := os.Stat(p); return err == nil }
	}
	r := &Result{}
	projects, skipped := Detect(o.Dir)
	r.Projects = projects
	r.Notes = append(r.Notes, skipped...)
	name := filepath.Base(o.Dir)

	d := &document{Header: []string{
		"A sluice manifest for " + o.Dir + ", written by `sluice init`.",
		"Reference: docs/manifest.md. Check it as sluiced will load it: sluiced --check --manifest THIS_FILE",
		"",
		"Keep this file outside the project: sluiced refuses a manifest that a write tool",
		"below could rewrite (docs/manifest.md, \"Where the manifest lives\").",
	}}
	d.Top = []kv{
		{Key: "schema_version", Val: int64(1), Comment: []string{"The manifest format; must be 1."}},
		{Key: "base", Val: o.Dir, Comment: []string{
			"The project. Roots and mounts below are relative to it, and so is every path an",
			"agent asks for: read_file {\"path\": \"README.md\"}, not an absolute path.",
		}},
		{Key: "deny_detail", Val: "reason", Comment: []string{
			"\"reason\": a denied call says why (outside_roots, never_listed, ...), which helps an agent",
			"correct itself; \"opaque\": it learns nothing (the audit ledger keeps the reason).",
		}},
		{Key: "redact", Val: obj{{Key: "builtin", Val: true}}, Comment: []string{
			"Secrets in what any tool returns (private keys, cloud keys, API tokens, JWTs) are",
			"replaced by [REDACTED:kind]; add your own shapes as patterns (docs/manifest.md, \"Redaction\").",
		}},
	}

	tools := []string{"read_file", "list_dir", "search_files", "edit_file", "write_file"}
	tests := testTools(o, projects, r)
	for _, t := range tests {
		tools = append(tools, t.name)
	}
	r.Tools = tools

	d.Tables = append(d.Tables, principalTables(o, r, tools)...)
	d.Tables = append(d.Tables, fileTools(name)...)
	for _, t := range tests {
		d.Tables = append(d.Tables, t.tables...)
	}
	if len(tests) == 0 {
		d.Tables = append(d.Tables, exampleTestTool())
		r.Notes = append(r.Notes, "no Go, Python or Node project found in "+o.Dir+", so no test tool was written (the TOML has an example, commented out)")
	}

	switch o.Format {
	case JSON:
		r.Data = d.json()
		r.Explain = d.explain()
	default:
		r.Data = d.toml()
	}
	return r, nil
}

func principalTables(o Options, r *Result, tools []string) []table {
	who := "uid " + strconv.FormatUint(uint64(o.AgentUID), 10)
	if o.AgentName != "" {
		who = o.AgentName + " (" + who + ")"
	}
	agent := table{Path: []string{"principals", "agent"}, Comment: []string{
		"Who may call. A caller is known by its uid (and groups), read from the socket by the kernel;",
		"a uid that matches no principal may call nothing.",
	}}
	agent.KVs = append(agent.KVs, kv{Key: "uids", Val: []any{int64(o.AgentUID)}, Comment: []string{
		"The user your agent (Claude Code, Codex, Gemini CLI, ...) runs as: " + who + ".",
		"Run the agent as a user of its own to keep it apart from your files; put that uid here.",
	}})
	if len(o.Groups) > 0 {
		var gids []any
		var names []string
		for _, g := range o.Groups {
			gids = append(gids, int64(g.GID))
			names = append(names, g.Name)
		}
		agent.KVs = append(agent.KVs, kv{Key: "gids", Val: gids, Comment: []string{
			"Members of these groups are the agent too (" + strings.Join(names, ", ") + "); a uid match wins over a group match.",
		}})
	}
	agent.KVs = append(agent.KVs, kv{Key: "tools", Val: []string{"*"}, Comment: []string{
		"The tools it may call: \"*\" for all of them, or a list of names.",
	}})
	if o.AgentUID == 0 {
		// uid 0 cannot be in two principals: the agent approves too.
		agent.KVs = append(agent.KVs, kv{Key: "approver", Val: true, Comment: []string{
			"The agent is root here, so it is also the only approver, and nobody approves their",
			"own call: its edits and writes, which wait for a human, can never be approved",
			"(sluiced warns). Better: the agent's own uid above (sluice init --agent USER), and",
			"a [principals.approver] with uids = [0].",
		}})
		r.Notes = append(r.Notes, "the agent is root (uid 0), so it is also the only approver, and nobody approves their own call: its edits and writes can never be approved; name the agent's user with --agent USER")
		return []table{agent}
	}
	var readOnly []string
	for _, t := range tools {
		if t == "read_file" || t == "list_dir" || t == "search_files" {
			readOnly = append(readOnly, t)
		}
	}
	approver := table{Path: []string{"principals", "approver"}, Comment: []string{
		"Who approves: edits, writes and the changes a test run makes wait for a human here",
		"(sluice approvals; sluice approve ID / sluice deny ID).",
	}, KVs: []kv{
		{Key: "uids", Val: []any{int64(0)}, Comment: []string{"root; add the uid of a person who reviews the agent's changes."}},
		{Key: "approver", Val: true, Comment: []string{"May approve or deny calls that wait for a human."}},
		{Key: "tools", Val: readOnly, Comment: []string{
			"The approver may look but not change: nobody approves their own call, so an",
			"approver that may call a tool needing approval could never have its own approved.",
		}},
	}}
	return []table{agent, approver}
}

func fileTools(name string) []table {
	rootsC := []string{"Directories (relative to base) it may reach; \".\" is the whole project. Narrow it, e.g. ['src', 'tests']."}
	neverC := []string{"Never shown or changed, even inside the roots: a name (.env) matches at any depth, a glob with / from the root."}
	return []table{
		{Path: []string{"tools", "read_file"}, Comment: []string{"Read a file (args: path, offset?, limit?, tail?)."}, KVs: []kv{
			{Key: "operation", Val: "read", Comment: []string{"Reads a file. Fixed for this tool: do not change it."}},
			{Key: "description", Val: "Read a file of " + name + ". Paths are relative to the project, e.g. README.md.", Comment: []string{"What the agent is told about the tool."}},
			{Key: "roots", Val: []string{"."}, Comment: rootsC},
			{Key: "never", Val: secrets, Comment: neverC},
			{Key: "max_bytes", Val: int64(262144), Comment: []string{"Longest answer in bytes; more is cut and marked truncated (the agent reads on with offset)."}},
		}},
		{Path: []string{"tools", "list_dir"}, Comment: []string{"List a directory (args: path, depth?, sizes?)."}, KVs: []kv{
			{Key: "operation", Val: "list", Comment: []string{"Lists a directory. Fixed for this tool: do not change it."}},
			{Key: "description", Val: "List a directory of " + name + ". Paths are relative to the project; \".\" is its top.", Comment: []string{"What the agent is told about the tool."}},
			{Key: "roots", Val: []string{"."}, Comment: rootsC},
			{Key: "never", Val: secrets, Comment: []string{"Never-listed entries are left out of listings."}},
		}},
		{Path: []string{"tools", "search_files"}, Comment: []string{"Find files by name glob and lines by RE2 regex (args: path, name?, content?, max_results?)."}, KVs: []kv{
			{Key: "operation", Val: "search", Comment: []string{"Searches names and contents. Fixed for this tool: do not change it."}},
			{Key: "description", Val: "Search " + name + ": files by name glob, lines by regex. Paths are relative to the project.", Comment: []string{"What the agent is told about the tool."}},
			{Key: "roots", Val: []string{"."}, Comment: rootsC},
			{Key: "never", Val: secrets, Comment: []string{"Never-listed files are skipped, never searched."}},
			{Key: "max_bytes", Val: int64(65536), Comment: []string{"Longest answer in bytes."}},
		}},
		{Path: []string{"tools", "edit_file"}, Comment: []string{"Replace text in a file (args: path, edits: [{old_text, new_text}], dry_run?)."}, KVs: []kv{
			{Key: "operation", Val: "edit", Comment: []string{"Edits a file in place. Fixed for this tool: do not change it."}},
			{Key: "description", Val: "Edit a file of " + name + " by exact text replacement; a human approves each edit. Paths are relative to the project.", Comment: []string{"What the agent is told about the tool."}},
			{Key: "roots", Val: []string{"."}, Comment: rootsC},
			{Key: "never", Val: writeNever, Comment: []string{"Never changed: the secrets above, and .git (a hook written there runs on your next commit)."}},
			{Key: "approval", Val: "human", Comment: []string{"\"human\": each edit waits, with its diff, until an approver approves it; \"none\" lets it through."}},
			{Key: "approval_timeout_ms", Val: int64(300000), Comment: []string{"How long an edit waits for a human before it ends approval_expired (5 min)."}},
		}},
		{Path: []string{"tools", "write_file"}, Comment: []string{"Create or replace a file (args: path, content, if_match?)."}, KVs: []kv{
			{Key: "operation", Val: "write", Comment: []string{"Writes a whole file. Fixed for this tool: do not change it."}},
			{Key: "description", Val: "Create or overwrite a file of " + name + "; a human approves each write. Paths are relative to the project.", Comment: []string{"What the agent is told about the tool."}},
			{Key: "roots", Val: []string{"."}, Comment: rootsC},
			{Key: "never", Val: writeNever, Comment: []string{"Never written: the secrets above, and .git."}},
			{Key: "approval", Val: "human", Comment: []string{"\"human\": each write waits for an approver; \"none\" lets it through."}},
			{Key: "approval_timeout_ms", Val: int64(300000), Comment: []string{"How long a write waits for a human (5 min)."}},
			{Key: "mode", Val: "create_or_overwrite", Comment: []string{"\"create\" (new files only), \"overwrite\" (existing ones only) or \"create_or_overwrite\"."}},
		}},
	}
}

// testTool is one execute tool and its tables.
type testTool struct {
	name   string
	tables []table
}

// Argument patterns (docs/manifest.md, "Command patterns"): each accepts
// one argument; none lets an argument that names a path leave the project
// by "..".
const (
	// A go test flag or package pattern: ./..., ./pkg, ./pkg/..., and
	// -run=NAME.
	goArg = `-v|-short|-failfast|-race|-cover|-count=[0-9]{1,4}|-timeout=[0-9]{1,5}[smh]|-run=[A-Za-z0-9_^$|/.*+?()\[\]]{1,200}|\.(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*(/\.\.\.)?`
	// A -run regexp (Go's test names and regexp syntax, never a flag).
	goRun = `[A-Za-z0-9_^$|/.*+?()\[\]]{1,200}`
	// A pytest -k expression: names, and, or, not, brackets; never a flag.
	pyK = `[A-Za-z0-9_][A-Za-z0-9_ .()\[\]-]{0,199}`
	// A unittest argument: a dotted test name or a start directory.
	pyUnit = `-v|-f|-b|discover|-s|-t|[A-Za-z0-9_][A-Za-z0-9_.]{0,199}`
	// An argument passed through npm test to the test runner.
	nodeArg = `-t|-i|--runInBand|--verbose|[A-Za-z0-9_@][A-Za-z0-9_@./ *-]{0,199}`
)

var pytestFlags = []string{"-x", "-q", "-v", "-vv", "-s", "-l", "--lf", "--ff", "--tb=short", "--tb=line", "--no-header"}

func re(s string) obj             { return obj{{Key: "regex", Val: s}} }
func rest(e obj) obj              { return obj{{Key: "rest", Val: e}} }
func pathArg(roots ...string) obj { return obj{{Key: "path", Val: roots}} }

func testTools(o Options, projects []Project, r *Result) []testTool {
	var out []testTool
	for _, p := range projects {
		name := "run_tests"
		if len(projects) > 1 {
			name = map[Kind]string{Go: "go_test", Python: "python_test", Node: "npm_test"}[p.Kind]
		}
		out = append(out, testTool{name: name, tables: testTables(o, p, name, r)})
	}
	return out
}

func testTables(o Options, p Project, name string, r *Result) []table {
	var (
		commands lines
		match    lines
		notMatch lines
		env      obj
		desc     string
		progs    []string
		timeout  int64 = 300000
		memory   int64 = 1024
		cache    []string
		cacheC   string
		cacheOn  bool
	)
	switch p.Kind {
	case Go:
		progs = []string{"go"}
		commands = lines{
			[]any{"go", "test", rest(re(goArg))},
			[]any{"go", "test", "-run", re(goRun), rest(re(goArg))},
		}
		match = lines{
			[]any{"go", "test", "./..."},
			[]any{"go", "test", "-v", "-run=TestAdd", "./pkg/..."},
			[]any{"go", "test", "-run", "TestAdd", "."},
		}
		notMatch = lines{
			[]any{"go", "test", "-exec=/bin/sh", "./..."},
			[]any{"go", "test", "../other/..."},
			[]any{"go", "run", "."},
		}
		env = obj{
			{Key: "GOTOOLCHAIN", Val: "local", Comment: []string{"Use the Go that is installed; never download another (there is no network)."}},
			{Key: "GOCACHE", Val: "/tmp/.cache/go-build", Comment: []string{"The build cache: in the cache below, or in the container's 64 MiB /tmp, which a cold build outgrows."}},
			{Key: "GOMODCACHE", Val: "/tmp/.cache/go-mod", Comment: []string{"Modules: there is no network, so only what a cached or vendored build has."}},
		}
		desc = "Run " + filepath.Base(o.Dir) + "'s Go tests: go test [-v] [-run NAME] [./...|./pkg]."
		timeout, memory = 600000, 2048
		cache = []string{"/tmp/.cache"}
		cacheC = "Go's build and module caches"
		// go test needs it: a cold build of the standard library's
		// test dependencies outgrows the container's 64 MiB /tmp.
		cacheOn = kernelAtLeast(o.Kernel, 6, 3)
		if !cacheOn {
			r.Notes = append(r.Notes, "go test needs a build cache larger than the container's 64 MiB /tmp, and caches need Linux 6.3 or later (this host: "+orUnknown(o.Kernel)+"); the cache is written commented out")
		}
	case Python:
		progs = []string{"python3"}
		pytest := lines{
			[]any{"python3", "-m", "pytest", rest(obj{{Key: "one_of", Val: pytestFlags}})},
			[]any{"python3", "-m", "pytest", pathArg("."), rest(obj{{Key: "one_of", Val: pytestFlags}})},
			[]any{"python3", "-m", "pytest", pathArg("."), "-k", re(pyK), rest(obj{{Key: "one_of", Val: pytestFlags}})},
			[]any{"python3", "-m", "pytest", "-k", re(pyK), rest(obj{{Key: "one_of", Val: pytestFlags}})},
		}
		unit := lines{[]any{"python3", "-m", "unittest", rest(re(pyUnit))}}
		if p.Pytest && !systemPytest(o) {
			r.Notes = append(r.Notes, "the project uses pytest, which the system's python3 (the one the sandbox sees) does not have: install it for the system (apt install python3-pytest), or call the unittest command")
		}
		if p.Pytest {
			commands = append(pytest, unit...)
			desc = "Run " + filepath.Base(o.Dir) + "'s Python tests: python3 -m pytest [PATH] [-k EXPR] [-x -q -v ...], or python3 -m unittest."
		} else {
			commands = append(unit, pytest...)
			desc = "Run " + filepath.Base(o.Dir) + "'s Python tests: python3 -m unittest [discover -s DIR] [-v], or python3 -m pytest [PATH] [-k EXPR]."
		}
		match = lines{
			[]any{"python3", "-m", "pytest", "-x", "-q"},
			[]any{"python3", "-m", "pytest", "tests", "-k", "add and not slow"},
			[]any{"python3", "-m", "unittest", "discover", "-s", "tests", "-v"},
		}
		notMatch = lines{
			[]any{"python3", "-m", "pytest", "/etc/passwd"},
			[]any{"python3", "-m", "pytest", "-p", "evil"},
			[]any{"python3", "-m", "pytest", "../elsewhere"},
			[]any{"python3", "-c", "print(1)"},
		}
		env = obj{
			{Key: "PYTHONDONTWRITEBYTECODE", Val: "1", Comment: []string{"No __pycache__ written into the project."}},
			{Key: "PYTEST_ADDOPTS", Val: "-p no:cacheprovider", Comment: []string{"No .pytest_cache either: a run changes nothing unless a test writes."}},
		}
	case Node:
		progs = []string{"npm", "node"}
		commands = lines{
			[]any{"npm", "test"},
			[]any{"npm", "test", "--", rest(re(nodeArg))},
		}
		match = lines{
			[]any{"npm", "test"},
			[]any{"npm", "test", "--", "src/add.test.js"},
			[]any{"npm", "test", "--", "-t", "adds numbers"},
		}
		notMatch = lines{
			[]any{"npm", "run", "build"},
			[]any{"npm", "test", "--", "--config=/etc/passwd"},
			[]any{"npx", "something"},
		}
		env = obj{
			{Key: "CI", Val: "true", Comment: []string{"Test runners do not watch or prompt."}},
			{Key: "npm_config_update_notifier", Val: "false", Comment: []string{"npm does not look for updates (there is no network)."}},
			{Key: "npm_config_fund", Val: "false", Comment: []string{"Nor prints funding messages."}},
		}
		desc = "Run " + filepath.Base(o.Dir) + "'s tests: npm test [-- ARGS for the test runner]."
		memory = 2048
		cache = []string{"/tmp/.npm"}
		cacheC = "npm's cache (HOME is /tmp in the container; useful with egress, which is off)"
	}
	if dirs := toolchainPath(o, progs, r); len(dirs) > 0 {
		env = append(obj{{Key: "PATH", Val: strings.Join(dirs, ":") + ":" + sandboxPath, Comment: []string{
			"Where the toolchain is: the container sees the host's /usr, /bin and /lib read-only, and nothing of $HOME.",
		}}}, env...)
	}

	tool := table{Path: []string{"tools", name}, Comment: []string{
		"Run the project's tests in a container (found: " + p.Marker + "). It sees the project read-only",
		"(minus the never-listed files), the host's /usr, /bin and /lib, no network, and its limits.",
	}}
	tool.KVs = []kv{
		{Key: "operation", Val: "execute", Comment: []string{"Runs a command in a container. Fixed for this tool: do not change it."}},
		{Key: "description", Val: desc, Comment: []string{"What the agent is told about the tool."}},
		{Key: "commands", Val: commands, Comment: []string{
			"The argv patterns allowed (docs/manifest.md, \"Command patterns\"): a string matches itself;",
			"{ regex = '…' } one argument (anchored RE2); { path = ['.'] } one existing file or directory",
			"in the project; { one_of = […] } one of these; { rest = … } any further arguments, each matching.",
			"The first that matches decides. Arguments that start with - are flags: allow only those you know.",
		}},
		{Key: "mounts", Val: []string{"."}, Comment: []string{"What the container sees of the project, read-only, at its host path."}},
		{Key: "cwd", Val: ".", Comment: []string{"Working directory: the project's top."}},
		{Key: "never", Val: secrets, Comment: []string{"These files do not exist inside the container."}},
		{Key: "timeout_ms", Val: timeout, Comment: []string{"A run is killed after this many milliseconds."}},
		{Key: "memory_mb", Val: memory, Comment: []string{"Memory limit in MiB (no swap)."}},
		{Key: "max_bytes", Val: int64(262144), Comment: []string{"Output kept, in bytes; the rest is cut and marked truncated."}},
		{Key: "examples", Val: obj{{Key: "match", Val: []any(match)}, {Key: "not_match", Val: []any(notMatch)}}, Comment: []string{
			"Checked against commands when the manifest loads: a failing one is a load error. Add yours.",
		}},
	}
	if len(cache) > 0 {
		tool.KVs = append(tool.KVs, cacheKVs(o, cache, cacheC, cacheOn)...)
	}
	writes := table{Path: []string{"tools", name, "writes"}, Comment: []string{
		"What a run may change: it writes into a scratch layer, never the project; when it ends (exit 0)",
		"what it changed (golden files, snapshots) is shown to an approver as a diff and written to the",
		"project only if approved. commit = 'discard' keeps nothing; 'auto' commits without asking.",
	}, KVs: []kv{
		{Key: "roots", Val: []string{"."}, Comment: []string{"Where changes may be; a change elsewhere refuses the whole changeset."}},
		{Key: "never", Val: []string{".git"}, Comment: []string{"Never changed (besides the tool's never list)."}},
		{Key: "commit", Val: "approval", Comment: []string{"\"approval\", \"auto\" or \"discard\"."}},
	}}
	envT := table{Path: []string{"tools", name, "env"}, Comment: []string{
		"The command's whole environment: nothing is inherited. HOME is /tmp, a tmpfs of each call's own.",
	}, KVs: []kv(env)}
	return []table{tool, envT, writes}
}

// cacheKVs writes the tool's caches, on or commented out. A manifest with
// cache is refused at start on a kernel older than 6.3 (a cache is an
// idmapped tmpfs), so a cache is on only where the tool needs one and the
// running kernel has it (on is decided by the caller).
func cacheKVs(o Options, cache []string, what string, on bool) []kv {
	state := "this host's kernel is unknown"
	if o.Kernel != "" {
		state = "this host runs " + o.Kernel
		if kernelAtLeast(o.Kernel, 6, 3) {
			state += ": it can"
		} else {
			state += ": it cannot"
		}
	}
	c := []string{
		"Keep " + what + " between runs, in a directory sluiced owns per tool and principal.",
		"Needs Linux 6.3 or later (" + state + "): sluiced refuses to start with it on an older kernel.",
	}
	if on {
		c = append(c, "Comment cache and cache_mb out if sluiced says the kernel cannot bind caches.")
	} else {
		c = append(c, "Uncomment to use.")
	}
	return []kv{
		{Key: "cache", Val: cache, Off: !on, Comment: c},
		{Key: "cache_mb", Val: int64(2048), Off: !on, Comment: []string{"The caches' cap, in MiB."}},
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// kernelAtLeast parses "6.18.44-…".
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// toolchainPath returns the directories to put before the container's
// PATH so that progs are found there, and notes a program the container
// cannot see.
func toolchainPath(o Options, progs []string, r *Result) []string {
	var dirs []string
	for _, prog := range progs {
		found := false
		for _, d := range strings.Split(sandboxPath, ":") {
			if o.Exists(filepath.Join(d, prog)) {
				found = true
				break
			}
		}
		if found {
			continue
		}
		p, err := o.LookPath(prog)
		if err != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("%s is not installed (not on your PATH nor in %s): install it for the system (e.g. apt install), where the sandbox can see it", prog, sandboxPath))
			continue
		}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if !filepath.IsAbs(p) {
			p, _ = filepath.Abs(p)
		}
		if !visibleInSandbox(p) {
			r.Notes = append(r.Notes, fmt.Sprintf("%s is at %s, which the sandbox does not show (it shows /usr, /bin, /lib and the project): install %s for the system (e.g. under /usr/local) or the test tool cannot run", prog, p, prog))
			continue
		}
		d := filepath.Dir(p)
		if !contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// systemPytest reports whether pytest is installed where a python3 under
// /usr finds it.
func systemPytest(o Options) bool {
	for _, g := range []string{"/usr/lib/python3*/*-packages/pytest", "/usr/local/lib/python3*/*-packages/pytest", "/usr/lib/python3/dist-packages/pytest"} {
		if m, _ := o.Glob(g); len(m) > 0 {
			return true
		}
	}
	return false
}

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}

// exampleTestTool is a commented-out test tool for a project where none
// was detected.
func exampleTestTool() table {
	return table{Path: []string{"tools", "run_tests"}, Off: true, Comment: []string{
		"No Go, Python or Node project was found, so no test tool is on. An example to adapt",
		"(docs/manifest.md, \"Command patterns\"); uncomment it and name your command:",
	}, KVs: []kv{
		{Key: "operation", Val: "execute", Comment: []string{"Runs a command in a container. Fixed for this tool: do not change it."}},
		{Key: "commands", Val: lines{[]any{"make", "test"}}},
		{Key: "mounts", Val: []string{"."}},
		{Key: "cwd", Val: "."},
		{Key: "never", Val: secrets},
		{Key: "timeout_ms", Val: int64(300000)},
	}}
}
