package scaffold

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
)

// projects are the sample projects, each a set of files, and what Generate
// must make of them.
var projects = []struct {
	name  string
	files map[string]string
	kinds []Kind
	// first is the first command's literal prefix.
	first []string
}{
	{"go", map[string]string{
		"go.mod":       "module example.com/calc\n\ngo 1.22\n",
		"calc.go":      "package calc\n\nfunc Add(a, b int) int { return a + b }\n",
		"calc_test.go": "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"bad\")\n\t}\n}\n",
	}, []Kind{Go}, []string{"go", "test"}},
	{"python-pytest", map[string]string{
		"pyproject.toml":     "[project]\nname = \"calc\"\n\n[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n",
		"calc.py":            "def add(a, b):\n    return a + b\n",
		"tests/test_calc.py": "from calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n",
	}, []Kind{Python}, []string{"python3", "-m", "pytest"}},
	{"python-unittest", map[string]string{
		"calc.py":            "def add(a, b):\n    return a + b\n",
		"tests/test_calc.py": "import unittest\n",
	}, []Kind{Python}, []string{"python3", "-m", "unittest"}},
	{"node", map[string]string{
		"package.json": `{"name": "calc", "scripts": {"test": "node --test"}}`,
		"calc.test.js": "require('node:test')\n",
	}, []Kind{Node}, []string{"npm", "test"}},
	{"node-placeholder", map[string]string{
		"package.json": `{"name": "calc", "scripts": {"test": "echo \"Error: no test specified\" && exit 1"}}`,
	}, nil, nil},
	{"go-and-node", map[string]string{
		"go.mod":       "module example.com/x\n",
		"package.json": `{"scripts": {"test": "jest"}}`,
	}, []Kind{Go, Node}, []string{"go", "test"}},
	{"empty", map[string]string{}, nil, nil},
}

func makeProject(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// opts are Options that see every toolchain where the sandbox does.
func opts(dir string, f Format) Options {
	return Options{Dir: dir, Format: f, AgentUID: 1000, AgentName: "alice", Kernel: "6.18.0",
		LookPath: func(p string) (string, error) { return "", errors.New("not found") },
		Exists:   func(string) bool { return true },
		Glob:     func(string) ([]string, error) { return []string{"found"}, nil }}
}

// parse loads data with the loader sluiced uses, under a file name of f's
// extension outside dir.
func parse(t *testing.T, data []byte, f Format) *authz.Manifest {
	t.Helper()
	m, err := authz.ParseFile("/etc/sluice/manifest"+f.Ext(), bytes.NewReader(data), "/etc/sluice")
	if err != nil {
		t.Fatalf("the loader refuses the %s manifest: %v\n%s", f, err, data)
	}
	return m
}

func TestGenerateLoads(t *testing.T) {
	for _, p := range projects {
		t.Run(p.name, func(t *testing.T) {
			dir := makeProject(t, p.files)
			versions := map[Format]string{}
			for _, f := range []Format{TOML, JSON} {
				r, err := Generate(opts(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				var kinds []Kind
				for _, pr := range r.Projects {
					kinds = append(kinds, pr.Kind)
				}
				if !reflect.DeepEqual(kinds, p.kinds) {
					t.Fatalf("detected %v, want %v", kinds, p.kinds)
				}
				m := parse(t, r.Data, f)
				versions[f] = m.Version
				if m.BaseDir != dir {
					t.Errorf("base %q, want %q", m.BaseDir, dir)
				}
				for _, name := range []string{"read_file", "list_dir", "search_files"} {
					if tl := m.Tools[name]; tl == nil || tl.Approval == api.ApprovalHuman || !reflect.DeepEqual(tl.Roots, []string{"."}) {
						t.Errorf("%s: %+v, want roots [.] without approval", name, tl)
					}
				}
				for _, name := range []string{"edit_file", "write_file"} {
					tl := m.Tools[name]
					if tl == nil || tl.Approval != api.ApprovalHuman {
						t.Fatalf("%s: %+v, want approval human", name, tl)
					}
					for _, g := range []string{".env", "*.pem", "id_rsa*", ".git"} {
						if !contains(tl.Never, g) {
							t.Errorf("%s.never lacks %s", name, g)
						}
					}
				}
				var execs []string
				for name, tl := range m.Tools {
					if tl.Operation == api.OpExecute {
						execs = append(execs, name)
						if tl.Writes == nil || tl.Writes.Commit != "approval" {
							t.Errorf("%s.writes: %+v, want commit approval", name, tl.Writes)
						}
					}
				}
				if len(execs) != len(p.kinds) {
					t.Fatalf("execute tools %v, want %d", execs, len(p.kinds))
				}
				if p.first != nil {
					name := "run_tests"
					if len(p.kinds) > 1 {
						name = "go_test"
					}
					c := m.Tools[name].Commands[0]
					for i, w := range p.first {
						if i >= len(c) || c[i].Lit != w {
							t.Fatalf("%s.commands[0] = %v, want it to begin %v", name, c, p.first)
						}
					}
				}
				if f == JSON && len(r.Explain) == 0 {
					t.Error("JSON: no explanations to print")
				}
			}
			// TOML and JSON spell one policy.
			if versions[TOML] != versions[JSON] {
				t.Errorf("TOML and JSON policy versions differ: %s vs %s", versions[TOML], versions[JSON])
			}
		})
	}
}

// Every key the user might change has a comment right above it.
func TestEveryKeyCommented(t *testing.T) {
	for _, p := range projects {
		dir := makeProject(t, p.files)
		r, err := Generate(opts(dir, TOML))
		if err != nil {
			t.Fatal(err)
		}
		keyLine := regexp.MustCompile(`^(# )?[A-Za-z_][A-Za-z0-9_]* = `)
		ls := strings.Split(string(r.Data), "\n")
		example := false // in a commented-out example table
		for i, l := range ls {
			switch {
			case strings.HasPrefix(l, "# ["):
				example = true
			case l == "":
				example = false
			}
			if !keyLine.MatchString(l) || example {
				continue
			}
			if i == 0 || !strings.HasPrefix(ls[i-1], "#") || keyLine.MatchString(ls[i-1]) {
				t.Errorf("%s: line %d has no comment above it: %s", p.name, i+1, l)
			}
		}
	}
}

// Golden-ish: the lines a reader looks for.
func TestTOMLLines(t *testing.T) {
	dir := makeProject(t, projects[0].files)
	r, err := Generate(opts(dir, TOML))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"schema_version = 1\n",
		"base = '" + dir + "'\n",
		"[principals.agent]\n",
		"uids = [1000]\n",
		"[principals.approver]\n",
		"uids = [0]\n",
		"approver = true\n",
		"tools = ['read_file', 'list_dir', 'search_files']\n",
		"approval = 'human'\n",
		"[tools.run_tests]\n",
		"  ['go', 'test', { rest = { regex = '",
		"[tools.run_tests.writes]\n",
		"commit = 'approval'\n",
		"\ncache = ['/tmp/.cache']\n",
		"GOTOOLCHAIN = 'local'\n",
		"# The user your agent (Claude Code, Codex, Gemini CLI, ...) runs as: alice (uid 1000).\n",
	} {
		if !strings.Contains(string(r.Data), "\n"+strings.TrimPrefix(want, "\n")) && !strings.Contains(string(r.Data), want) {
			t.Errorf("TOML lacks %q", want)
		}
	}
}

// A kernel without idmapped tmpfs (before 6.3) gets no cache: sluiced would
// refuse to start. The cache is written commented out, and said so.
func TestCacheByKernel(t *testing.T) {
	dir := makeProject(t, projects[0].files)
	for _, c := range []struct {
		kernel string
		on     bool
	}{{"6.18.44-fc", true}, {"6.3.0", true}, {"6.1.0-28-amd64", false}, {"5.15.0", false}, {"", false}} {
		o := opts(dir, TOML)
		o.Kernel = c.kernel
		r, err := Generate(o)
		if err != nil {
			t.Fatal(err)
		}
		m := parse(t, r.Data, TOML)
		on := len(m.Tools["run_tests"].Cache) > 0
		if on != c.on {
			t.Errorf("kernel %q: cache on %v, want %v", c.kernel, on, c.on)
		}
		if !c.on && !strings.Contains(string(r.Data), "\n# cache = ['/tmp/.cache']\n") {
			t.Errorf("kernel %q: the cache is not written commented out", c.kernel)
		}
		if !c.on && len(r.Notes) == 0 {
			t.Errorf("kernel %q: no note says why", c.kernel)
		}
		o.Format = JSON
		r, err = Generate(o)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(r.Data), `"cache"`) != c.on {
			t.Errorf("kernel %q: JSON has cache: %v, want %v", c.kernel, !c.on, c.on)
		}
	}
}

// The agent is the invoker (or SUDO_UID, or --agent); root approves and may
// only look, so it cannot approve calls of its own. An agent that is root
// is one principal that approves too.
func TestPrincipals(t *testing.T) {
	dir := makeProject(t, nil)
	o := opts(dir, JSON)
	o.Groups = []Group{{Name: "sluice", GID: 990}}
	r, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	m := parse(t, r.Data, JSON)
	a, ap := m.Principals["agent"], m.Principals["approver"]
	if a == nil || !reflect.DeepEqual(a.UIDs, []uint32{1000}) || !reflect.DeepEqual(a.GIDs, []uint32{990}) || a.Approver || !reflect.DeepEqual(a.Tools, []string{"*"}) {
		t.Errorf("agent: %+v", a)
	}
	if ap == nil || !reflect.DeepEqual(ap.UIDs, []uint32{0}) || !ap.Approver {
		t.Fatalf("approver: %+v", ap)
	}
	for _, tn := range ap.Tools {
		if m.Tools[tn].Approval == api.ApprovalHuman {
			t.Errorf("the approver may call %s, which needs approval", tn)
		}
	}
	o.AgentUID, o.AgentName, o.Groups = 0, "root", nil
	r, err = Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	m = parse(t, r.Data, JSON)
	if len(m.Principals) != 1 || m.Principals["agent"] == nil || !m.Principals["agent"].Approver {
		t.Errorf("root agent: %+v", m.Principals)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "--agent USER") {
		t.Errorf("root agent: no note names --agent: %v", r.Notes)
	}
}

// A toolchain outside the container's PATH but under /usr is put on PATH;
// one the container cannot see is a note, never a PATH entry.
func TestToolchainPath(t *testing.T) {
	dir := makeProject(t, projects[0].files)
	for _, c := range []struct {
		found, path, note string
	}{
		{"/usr/local/go/bin/go", "/usr/local/go/bin:" + sandboxPath, ""},
		{"/home/alice/sdk/go/bin/go", "", "which the sandbox does not show"},
		{"", "", "go is not installed"},
	} {
		o := opts(dir, JSON)
		o.Exists = func(string) bool { return false }
		o.LookPath = func(string) (string, error) {
			if c.found == "" {
				return "", errors.New("not found")
			}
			return c.found, nil
		}
		r, err := Generate(o)
		if err != nil {
			t.Fatal(err)
		}
		m := parse(t, r.Data, JSON)
		if got := m.Tools["run_tests"].Env["PATH"]; got != c.path {
			t.Errorf("%s: PATH %q, want %q", c.found, got, c.path)
		}
		if notes := strings.Join(r.Notes, "\n"); c.note != "" && !strings.Contains(notes, c.note) {
			t.Errorf("%s: notes %q lack %q", c.found, notes, c.note)
		}
	}
}

// A pytest project on a host whose system python3 lacks pytest: a note.
func TestPytestNote(t *testing.T) {
	dir := makeProject(t, projects[1].files)
	o := opts(dir, TOML)
	for _, have := range []bool{true, false} {
		o.Glob = func(string) ([]string, error) {
			if have {
				return []string{"/usr/lib/python3/dist-packages/pytest"}, nil
			}
			return nil, nil
		}
		r, err := Generate(o)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(strings.Join(r.Notes, "\n"), "python3-pytest"); got == have {
			t.Errorf("pytest installed %v: note %v", have, got)
		}
	}
}

func TestJSONExplains(t *testing.T) {
	dir := makeProject(t, projects[1].files)
	r, err := Generate(opts(dir, JSON))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(r.Data, &v); err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(r.Explain, "\n")
	for _, want := range []string{"base: The project.", "tools.edit_file.approval: ", "tools.run_tests.commands: The argv patterns", "tools.run_tests.writes.commit: "} {
		if !strings.Contains(joined, want) {
			t.Errorf("explanations lack %q", want)
		}
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"toml": TOML, "TOML": TOML, "json": JSON} {
		if f, err := ParseFormat(in); err != nil || f != want {
			t.Errorf("%q: %v %v", in, f, err)
		}
	}
	if _, err := ParseFormat("yaml"); err == nil || !strings.Contains(err.Error(), "use toml") {
		t.Errorf("yaml: %v", err)
	}
}

func TestKernelAtLeast(t *testing.T) {
	for rel, want := range map[string]bool{"6.3": true, "6.3.1": true, "6.18.44-fc-v1272": true, "7.0.0": true, "6.2.16": false, "6.1.0-28-amd64": false, "5.19": false, "x": false, "": false} {
		if got := kernelAtLeast(rel, 6, 3); got != want {
			t.Errorf("%q: %v", rel, got)
		}
	}
}

// WriteFile never replaces a file without force, leaves no temporary file
// behind, and replaces it whole with force.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.toml")
	if err := WriteFile(p, []byte("one\n"), false); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two\n"), false); !errors.Is(err, ErrExists) {
		t.Fatalf("second write without force: %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "one\n" {
		t.Fatalf("without force the file became %q", b)
	}
	if err := WriteFile(p, []byte("three\n"), true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "three\n" {
		t.Fatalf("with force the file is %q", b)
	}
	// A symlink at the name is not followed: it is replaced only with force.
	link := filepath.Join(dir, "l.toml")
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("keep\n"), 0o644)
	os.Symlink(target, link)
	if err := WriteFile(link, []byte("x"), false); !errors.Is(err, ErrExists) {
		t.Errorf("symlink without force: %v", err)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "m.toml"), []byte("x"), false); err == nil {
		t.Error("a missing directory: no error")
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !reflect.DeepEqual(names, []string{"l.toml", "m.toml", "target"}) {
		t.Errorf("left in the directory: %v", names)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Errorf("the symlink's target was written: %q", b)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}
}

func TestInside(t *testing.T) {
	dir := t.TempDir()
	proj := filepath.Join(dir, "proj")
	os.MkdirAll(filepath.Join(proj, "sub"), 0o755)
	os.Symlink(proj, filepath.Join(dir, "alias"))
	for p, want := range map[string]bool{
		filepath.Join(proj, "m.toml"):                  true,
		filepath.Join(proj, "sub", "m.toml"):           true,
		filepath.Join(proj, "new", "deeper", "m.toml"): true,
		filepath.Join(dir, "alias", "m.toml"):          true, // the same directory by a symlink
		filepath.Join(dir, "m.toml"):                   false,
		filepath.Join(dir, "proj2", "m.toml"):          false,
		"/etc/sluice/manifest.toml":                    false,
	} {
		if got := Inside(p, proj); got != want {
			t.Errorf("Inside(%s): %v, want %v", p, got, want)
		}
	}
}

func TestDefaultOutput(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", "/cfg")
	if p, err := DefaultOutput("/work/calc", TOML); err != nil || p != "/cfg/sluice/calc.toml" {
		t.Errorf("%q %v", p, err)
	}
	if p, err := DefaultOutput("/", JSON); err != nil || p != "/cfg/sluice/root.json" {
		t.Errorf("%q %v", p, err)
	}
}

func TestNextSteps(t *testing.T) {
	for _, c := range []struct {
		n       Next
		want    []string
		notWant []string
	}{
		{Next{Manifest: "/c/p.toml", Dir: "/home/alice/p", Format: TOML, Agent: "alice", SocketGroup: "sluice"},
			[]string{"sluiced --check --manifest /c/p.toml", "install -m 0640 /c/p.toml /etc/sluice/manifest.toml", "ExecStart=\n", "--manifest /etc/sluice/manifest.toml",
				"ReadWritePaths=/home/alice/p", "ProtectHome=tmpfs", "BindPaths=/home/alice/p", "systemctl reload sluiced",
				"groupadd --system sluice", "usermod -aG sluice alice", "sluice client setup claude|codex|gemini|cursor|vscode", "sluice client check"}, nil},
		{Next{Manifest: "/c/p.json", Dir: "/srv/p", Format: JSON, Agent: "bob", SocketGroup: "sluice", SocketGroupExists: true},
			[]string{"install -m 0640 /c/p.json /etc/sluice/manifest.json", "ReadWritePaths=/srv/p", "usermod -aG sluice bob"},
			[]string{"ExecStart=", "ProtectHome", "groupadd"}},
		{Next{Manifest: "/c/p.toml", Dir: "/srv/p", Format: TOML, Agent: "root", AgentIsRoot: true, SocketGroup: "sluice"},
			[]string{"--agent USER"}, []string{"usermod -aG sluice root"}},
	} {
		got := NextSteps(c.n)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%+v: lacks %q:\n%s", c.n, w, got)
			}
		}
		for _, w := range c.notWant {
			if strings.Contains(got, w) {
				t.Errorf("%+v: has %q:\n%s", c.n, w, got)
			}
		}
	}
}
