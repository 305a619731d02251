package authz

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

const seedJSON = `{"schema_version":1,"tools":{"read_file":{"operation":"read","roots":["workspace/src","workspace/tests"],"max_bytes":65536},"run_tests":{"operation":"execute","commands":[["python","-m","unittest"]]}}}`

const seedTOML = `
schema_version = 1

[tools.read_file]
operation = 'read'
roots = ['workspace/src', 'workspace/tests']
max_bytes = 65536

[tools.run_tests]
operation = 'execute'
commands = [['python', '-m', 'unittest']]
`

// TestTOMLMatchesJSON: the seed manifest written in TOML loads, and has
// the policy_version of its JSON twin (one canonical form).
func TestTOMLMatchesJSON(t *testing.T) {
	j, err := Parse(strings.NewReader(seedJSON), "/base")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseFile("/etc/sluice/manifest.toml", strings.NewReader(seedTOML), "/base")
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != j.Version {
		t.Errorf("TOML %s, JSON %s", m.Version, j.Version)
	}
	if got := m.Tools["run_tests"].Commands; len(got) != 1 || strings.Join(got[0], " ") != "python -m unittest" {
		t.Errorf("commands: %v", got)
	}
}

// TestTOMLErrors: each mistake names the key and the line, as the JSON
// loader names the key.
func TestTOMLErrors(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"unknown key", seedTOML + "\n[tools.x]\noperation = 'read'\nroots = ['a']\nmax_byte = 3\n",
			"manifest: tools.x.max_byte: line 16: unknown key (schema_version 1 has no such key; check its spelling)"},
		{"unknown top key", "schema_version = 1\nbogus = 1\n[tools.a]\noperation='read'\nroots=['a']\n",
			"manifest: bogus: line 2: unknown key"},
		{"repeated key", "schema_version = 1\n[tools.a]\noperation = 'read'\nroots = ['a']\nroots = ['b']\n",
			"line 5"},
		{"repeated table", "schema_version = 1\n[tools.a]\noperation = 'read'\n[tools.a]\nroots = ['b']\n",
			"line 4"},
		{"wrong type", "schema_version = 1\n[tools.a]\noperation = 'read'\nroots = ['a']\nmax_bytes = 'lots'\n",
			"line 5"},
		{"no schema_version", "[tools.a]\noperation = 'read'\n", "manifest: schema_version: missing; add schema_version = 1"},
		{"schema_version 2", "schema_version = 2\n", "manifest: schema_version: is 2; this sluice reads only 1"},
		{"validated as JSON is", "schema_version = 1\n[tools.a]\noperation = 'read'\nroots = ['../x']\n", "manifest: tools.a.roots[0]"},
		{"not TOML", "schema_version = = 1\n", "line 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseTOML(strings.NewReader(c.doc), "/base")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// TestExampleTOMLTwin: profiles/examples/manifest.toml says what
// manifest.json says, to the policy_version.
func TestExampleTOMLTwin(t *testing.T) {
	load := func(name string) *Manifest {
		t.Helper()
		f, err := os.Open(filepath.Join("..", "profiles", "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		m, err := ParseFile(name, f, "/base")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return m
	}
	if j, tm := load("manifest.json"), load("manifest.toml"); j.Version != tm.Version {
		t.Errorf("manifest.toml %s, manifest.json %s:\n%s\n%s", tm.Version, j.Version, tm.Canonical, j.Canonical)
	}
}

// FuzzParseTOML: ParseTOML never panics, and what it accepts is a
// manifest Parse accepts too, with the same policy_version (it went
// through Parse as JSON).
func FuzzParseTOML(f *testing.F) {
	f.Add(seedTOML)
	f.Add("schema_version = 1\n[tools.a]\noperation = 'execute'\ncommands = [['x']]\nmounts = ['m']\nenv = { A = 'b' }\npool = 0\n")
	f.Add("schema_version = 1\n[principals.p]\nuids = [1]\ntools = ['*']\n[tools.a]\noperation = 'write'\nroots = ['r']\nmode = 'create'\n")
	f.Fuzz(func(t *testing.T, doc string) {
		m, err := ParseTOML(strings.NewReader(doc), "/base")
		if err != nil {
			return
		}
		j, err := Parse(strings.NewReader(string(m.Canonical)), "/base")
		if err != nil || j.Version != m.Version {
			t.Fatalf("accepted TOML whose canonical form does not parse the same: %v\n%s", err, m.Canonical)
		}
	})
}

// TestExampleCapabilities: profiles/examples/capabilities.toml (the
// capability-broker example of docs/egress.md) loads, and decides as it
// says: a fetch only from its hosts, a notify only after a human's yes,
// never-listed names refused.
func TestExampleCapabilities(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "profiles", "examples", "capabilities.toml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := ParseFile("capabilities.toml", f, "/base")
	if err != nil {
		t.Fatal(err)
	}
	s := func(v string) *string { return &v }
	for _, c := range []struct {
		req  Request
		want api.Reason
	}{
		{Request{Principal: "local", Tool: "http_fetch", URL: s("https://api.github.com/repos/x/y"),
			Resolved: []Resource{{Outcome: OutcomeOK, Addrs: []string{"140.82.112.6"}}}}, api.ReasonAllowed},
		{Request{Principal: "local", Tool: "http_fetch", URL: s("https://api.github.com.evil.example/")}, api.ReasonEgressDenied},
		{Request{Principal: "local", Tool: "http_fetch", URL: s("https://api.github.com/"),
			Resolved: []Resource{{Outcome: OutcomeOK, Addrs: []string{"140.82.112.6", "127.0.0.1"}}}}, api.ReasonEgressDenied},
		{Request{Principal: "local", Tool: "notify", URL: s("https://hooks.internal.example/ci"),
			Resolved: []Resource{{Outcome: OutcomeOK, Addrs: []string{"140.82.112.7"}}}}, api.ReasonApprovalRequired},
		{Request{Principal: "local", Tool: "notify", URL: s("https://evil.example/ci")}, api.ReasonEgressDenied},
		{Request{Principal: "local", Tool: "fs_read", Path: s("workspace/.env")}, api.ReasonNeverListed},
	} {
		if d := Decide(m, &c.req); d.Reason != c.want {
			t.Errorf("%s %s: %s (%s), want %s", c.req.Tool, *firstOf(c.req.URL, c.req.Path), d.Reason, d.Rule, c.want)
		}
	}
}

func firstOf(a, b *string) *string {
	if a != nil {
		return a
	}
	return b
}
