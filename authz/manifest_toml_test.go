package authz

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"

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
	if got, _ := m.Tools["run_tests"].OnlyCommand(); strings.Join(got, " ") != "python -m unittest" {
		t.Errorf("commands: %v", got)
	}
}

// TestTOMLErrors: each mistake names the key and the line, as the JSON
// loader names the key.
func TestTOMLErrors(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"unknown key", seedTOML + "\n[tools.x]\noperation = 'read'\nroots = ['a']\nmax_byte = 3\n",
			"manifest: tools.x.max_byte: line 16: unknown key (schema_version 1 has no such key; check its spelling: keys are case-sensitive)"},
		{"unknown top key", "schema_version = 1\nbogus = 1\n[tools.a]\noperation='read'\nroots=['a']\n",
			"manifest: bogus: line 2: unknown key"},
		{"repeated key", "schema_version = 1\n[tools.a]\noperation = 'read'\nroots = ['a']\nroots = ['b']\n",
			"line 5"},
		{"repeated table", "schema_version = 1\n[tools.a]\noperation = 'read'\n[tools.a]\nroots = ['b']\n",
			"line 4"},
		{"wrong type", "schema_version = 1\n[tools.a]\noperation = 'read'\nroots = ['a']\nmax_bytes = 'lots'\n",
			`manifest: tools.a.max_bytes: line 5: a number of bytes, e.g. 65536, not the string "lots"`},
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
		{Request{Principal: "local", Tool: "http_fetch", Args: &FetchArgs{URL: s("https://api.github.com/repos/x/y"), Method: "GET"},
			Resolved: [][]Resource{{{Outcome: OutcomeOK, Addrs: []string{"140.82.112.6"}}}}}, api.ReasonAllowed},
		{Request{Principal: "local", Tool: "http_fetch", Args: &FetchArgs{URL: s("https://api.github.com.evil.example/")}}, api.ReasonEgressDenied},
		{Request{Principal: "local", Tool: "http_fetch", Args: &FetchArgs{URL: s("https://api.github.com/"), Method: "GET"},
			Resolved: [][]Resource{{{Outcome: OutcomeOK, Addrs: []string{"140.82.112.6", "127.0.0.1"}}}}}, api.ReasonEgressDenied},
		{Request{Principal: "local", Tool: "notify", Args: &PostArgs{URL: s("https://hooks.internal.example/ci")},
			Resolved: [][]Resource{{{Outcome: OutcomeOK, Addrs: []string{"140.82.112.7"}}}}}, api.ReasonApprovalRequired},
		{Request{Principal: "local", Tool: "notify", Args: &PostArgs{URL: s("https://evil.example/ci")}}, api.ReasonEgressDenied},
		{Request{Principal: "local", Tool: "fs_read", Args: &ReadArgs{Path: s("workspace/.env")}}, api.ReasonNeverListed},
	} {
		if d := Decide(m, &c.req); d.Reason != c.want {
			t.Errorf("%s %s: %s (%s), want %s", c.req.Tool, c.req.Args.Subject(), d.Reason, d.Rule, c.want)
		}
	}
}

// TestTOMLNoJSONMeaning: a TOML value JSON cannot carry (a date or
// time, nan, inf) is refused, naming its key and line.
func TestTOMLNoJSONMeaning(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"schema_version = 1\n[tools.r]\noperation = 'read'\nroots = ['a']\ndescription = 1979-05-27\n",
			"manifest: tools.r.description: line 5: is a TOML date or time"},
		{"schema_version = 1\n[tools.r]\noperation = 'read'\nroots = [1979-05-27T07:32:00Z]\n",
			"manifest: tools.r.roots[0]: line 4: is a TOML date or time"},
		{"schema_version = 1\n[tools.x]\noperation = 'execute'\ncommands = [['a']]\ncpus = nan\n",
			"manifest: tools.x.cpus: line 5: is NaN"},
		{"schema_version = 1\n[tools.x]\noperation = 'execute'\ncommands = [['a']]\ncpus = -inf\n",
			"manifest: tools.x.cpus: line 5: is -Inf"},
	} {
		_, err := ParseTOML(strings.NewReader(c.doc), "/base")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.doc, err, c.want)
		}
	}
}

// FuzzTOMLJSONTwins: the same document written as JSON and as TOML gets
// the same policy (one policy_version) or the same refusal (naming the
// same key): TOML and JSON have one validation path, with no difference
// of key spelling or of omitted values (docs/security.md, "The third
// review"). The input is JSON; a document TOML cannot hold (null, a
// number no float holds, not an object) is skipped.
func FuzzTOMLJSONTwins(f *testing.F) {
	for _, s := range []string{
		seedJSON,
		`{"schema_version":1,"principals":{"agent":{"uids":[1000],"tools":["r"],"Tools":["*"],"APPROVER":true}},"tools":{"r":{"operation":"read","roots":["a"]}}}`,
		`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"],"never":[".env"],"NEVER":[]}}}`,
		`{"schema_version":1,"tools":{"f":{"operation":"fetch","hosts":["example.com"],"schemes":[],"Insecure_Allow_Private":true}}}`,
		`{"schema_version":1,"principals":{},"tools":{"r":{"operation":"read","roots":["a"],"max_bytes":1.0}}}`,
		`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["pip"]],"cpus":1e0,"env":{"A":"1","a":"2"},"egress":{"hosts":["pypi.org"],"schemes":[]}}}}`,
		`{"schema_version":1,"tools":{"w":{"operation":"write","roots":["a"],"approval":"human","Approval":"none","mode":"create"}}}`,
		`{"schema_version":1,"tools":{"x":{"operation":"execute","mounts":["w"],"commands":[["g",{"one_of":["-n"]},{"regex":"[a-z]+"},{"path":["w"]},{"rest":{"glob":"*.py"}}]],"examples":{"match":[["g","-n","a","w/x","b.py"]],"not_match":[["g"]]}}}}`,
		`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["g",{"any":true,"glob":"*"}]]}}}`,
		`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["black",{"rest":{"glob":"*.py"}}]],"mounts":["workspace"],"writes":{"roots":["workspace/src"],"never":["*.pem"],"commit":"auto","keep":["*.py"],"max_files":100,"max_bytes":1048576,"commit_on":"always"}}}}`,
		`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["make","test"]],"mounts":["."],"writes":{"roots":["."],"commit":"discard"},"cache":["/root/.cache"],"cache_mb":64,"egress":{"hosts":["pypi.org"]}}}}`,
		`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["make"]],"mounts":["w"],"writes":{"roots":["w/"],"Commit":"auto","keep":[]},"cache":["/tmp/c","/root"],"cache_mb":0}}}`,
		`{"schema_version":1,"redact":{"patterns":[{"name":"ticket","regex":"TCK-[0-9]{6}"}]},"tools":{"r":{"operation":"read","roots":["a"],"redact":{"builtin":false,"patterns":[{"name":"pw","regex":"pw=\\S+"}]}}}}`,
		`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"],"redact":{"Builtin":true,"patterns":[{"name":"x","regex":"^a"}]}}}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		d := json.NewDecoder(strings.NewReader(doc))
		d.UseNumber()
		var tree any
		if d.Decode(&tree) != nil {
			return
		}
		obj, ok := tree.(map[string]any)
		if !ok {
			return
		}
		native, ok := tomlNative(obj)
		if !ok {
			return
		}
		js, err := json.Marshal(obj) // json.Number keeps its text; keys sorted
		if err != nil {
			return
		}
		tm, err := toml.Marshal(native)
		if err != nil || toml.Unmarshal(tm, new(map[string]any)) != nil {
			return // not a document go-toml writes and reads back
		}
		jm, jerr := Parse(bytes.NewReader(js), "/base")
		m, terr := ParseTOML(bytes.NewReader(tm), "/base")
		switch {
		case jerr == nil && terr == nil:
			if jm.Version != m.Version {
				t.Fatalf("JSON %s\nTOML %s\ndiffer:\n%s\n%s", js, tm, jm.Canonical, m.Canonical)
			}
		case jerr == nil || terr == nil:
			t.Fatalf("JSON %s: %v\nTOML:\n%s\n%v", js, jerr, tm, terr)
		default:
			var je, te *ManifestError
			if !errors.As(jerr, &je) || !errors.As(terr, &te) || je.Key != te.Key {
				t.Fatalf("refused at different keys:\nJSON %s: %v\nTOML:\n%s\n%v", js, jerr, tm, terr)
			}
		}
	})
}

// tomlNative is a JSON tree as go-toml marshals it: a number an int64
// when it is one, else a float64; false if the tree has a null or a
// number no float64 holds.
func tomlNative(v any) (any, bool) {
	switch v := v.(type) {
	case nil:
		return nil, false
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return i, true
		}
		fl, err := strconv.ParseFloat(string(v), 64)
		return fl, err == nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			n, ok := tomlNative(e)
			if !ok {
				return nil, false
			}
			out[k] = n
		}
		return out, true
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			n, ok := tomlNative(e)
			if !ok {
				return nil, false
			}
			out[i] = n
		}
		return out, true
	}
	return v, true
}
