package authz

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// execManifest is a manifest of one execute tool "x" with these commands
// (JSON) and more keys; base /srv/agent, mounts workspace, cwd workspace.
func execManifest(commands, more string) string {
	return `{"schema_version":1,"tools":{"x":{"operation":"execute","mounts":["workspace"],"cwd":"workspace",` +
		`"never":[".env","*.pem","private/**"],"commands":` + commands + more + `}}}`
}

func decideArgv(m *Manifest, argv []string, res ...Resource) Decision {
	req := &Request{Principal: LocalPrincipal, Tool: "x", Args: &ExecArgs{Argv: argv}, Resolved: [][]Resource{res}}
	return Decide(m, req)
}

// okAt is an ok resolution of argument k beneath root, as rel.
func okAt(k int, root, rel string) Resource {
	return Resource{Arg: k, RootPath: root, Outcome: OutcomeOK, Rel: rel, Kind: KindFile, Path: "/srv/agent/" + path.Join(root, rel)}
}

// TestCommandPatternKinds: each element kind matches what it says and
// nothing else; the first entry that matches decides and is the rule.
func TestCommandPatternKinds(t *testing.T) {
	m := parse(t, execManifest(`[
		["git", "status"],
		["grep", {"one_of": ["-n", "-i", "-c"]}, {"regex": "[a-z_]{1,32}"}, {"glob": "*.py"}],
		["python3", "-m", "pytest", {"path": ["workspace/tests"]}, "-k", {"regex": "[A-Za-z0-9_ ]+"}],
		["ls", {"rest": {"one_of": ["-l", "-a"]}}],
		["echo", {"any": true}],
		["echo", "x"],
		["make", {"rest": {"any": true}}]
	]`, ""))
	ix := func(i int) string { return fmt.Sprintf("tools.x.commands[%d]", i) }
	for _, c := range []struct {
		argv []string
		res  []Resource
		rule string // "" denied
	}{
		{[]string{"git", "status"}, nil, ix(0)},
		{[]string{"git", "status", "-s"}, nil, ""},
		{[]string{"git"}, nil, ""},
		{[]string{"grep", "-n", "calc", "calc.py"}, nil, ix(1)},
		{[]string{"grep", "-v", "calc", "calc.py"}, nil, ""},            // one_of
		{[]string{"grep", "-n", "Calc", "calc.py"}, nil, ""},            // regex: [a-z_]
		{[]string{"grep", "-n", "calc;rm", "calc.py"}, nil, ""},         // anchored
		{[]string{"grep", "-n", "calc", "src/calc.py"}, nil, ""},        // glob: * stops at /
		{[]string{"grep", "-n", "calc", "calc.pyc"}, nil, ""},           // glob
		{[]string{"grep", "-n", "calc", "calc.py", "more.py"}, nil, ""}, // no rest
		{[]string{"python3", "-m", "pytest", "tests/test_calc.py", "-k", "add"},
			[]Resource{okAt(3, "workspace/tests", "test_calc.py")}, ix(2)},
		{[]string{"python3", "-m", "pytest", "tests/test_calc.py", "-k", "add"}, nil, ""}, // not resolved
		{[]string{"python3", "-m", "pytest", "tests/test_calc.py", "-k", "add"},
			[]Resource{okAt(4, "workspace/tests", "test_calc.py")}, ""}, // another argument's
		{[]string{"python3", "-m", "pytest", "tests/test_calc.py", "-k", "add"},
			[]Resource{okAt(3, "workspace/src", "calc.py")}, ""}, // another root
		{[]string{"python3", "-m", "pytest", "tests/test_calc.py", "-k", "add;x"},
			[]Resource{okAt(3, "workspace/tests", "test_calc.py")}, ""},
		{[]string{"ls"}, nil, ix(3)},
		{[]string{"ls", "-l", "-a", "-l"}, nil, ix(3)},
		{[]string{"ls", "-l", "/"}, nil, ""},
		{[]string{"echo", "x"}, nil, ix(4)}, // first match, not the literal after it
		{[]string{"echo", ""}, nil, ix(4)},
		{[]string{"echo"}, nil, ""},
		{[]string{"echo", "a", "b"}, nil, ""},
		{[]string{"make"}, nil, ix(6)},
		{[]string{"make", "-j", "4", "all"}, nil, ix(6)},
		{[]string{}, nil, ""},
	} {
		d := decideArgv(m, c.argv, c.res...)
		switch {
		case c.rule == "" && (d.Allowed() || d.Reason != api.ReasonCommandNotAllowed || d.Rule != "tools.x.commands"):
			t.Errorf("%q: %s/%s %s, want command_not_allowed", c.argv, d.WireVerdict(), d.Reason, d.Rule)
		case c.rule != "" && (!d.Allowed() || d.Rule != c.rule):
			t.Errorf("%q: %s/%s %s, want allowed by %s", c.argv, d.WireVerdict(), d.Reason, d.Rule, c.rule)
		}
	}
}

// TestPathElementResolutions: a path element matches only an argument
// the kernel resolved beneath one of its roots to a file or directory
// that never does not hide; whatever else the resolution says denies.
func TestPathElementResolutions(t *testing.T) {
	m := parse(t, execManifest(`[["cat", {"path": ["workspace/src", "workspace/tests"]}]]`, ""))
	argv := []string{"cat", "x"}
	for _, c := range []struct {
		name string
		res  Resource
		ok   bool
	}{
		{"file", okAt(1, "workspace/src", "a.py"), true},
		{"second root", okAt(1, "workspace/tests", "t.py"), true},
		{"root spelled unclean", okAt(1, "workspace/./tests/", "t.py"), true},
		{"dir", Resource{Arg: 1, RootPath: "workspace/src", Outcome: OutcomeOK, Rel: "pkg", Kind: KindDir}, true},
		{"escapes", Resource{Arg: 1, RootPath: "workspace/src", Outcome: OutcomeEscapes}, false},
		{"not found", Resource{Arg: 1, RootPath: "workspace/src", Outcome: OutcomeNotFound}, false},
		{"error", Resource{Arg: 1, RootPath: "workspace/src", Outcome: OutcomeError}, false},
		{"fifo", Resource{Arg: 1, RootPath: "workspace/src", Outcome: OutcomeOK, Rel: "p", Kind: KindFIFO}, false},
		{"device", Resource{Arg: 1, RootPath: "workspace/src", Outcome: OutcomeOK, Rel: "d", Kind: KindDevice}, false},
		{"symlink to .env", okAt(1, "workspace/src", "sub/.env"), false},
		{"into private", okAt(1, "workspace/src", "private/keys.txt"), false},
		{"a root not the element's", okAt(1, "workspace", "src/a.py"), false},
		{"the program's", okAt(0, "workspace/src", "a.py"), false},
	} {
		if d := decideArgv(m, argv, c.res); d.Allowed() != c.ok {
			t.Errorf("%s: %s/%s, want allowed %t", c.name, d.WireVerdict(), d.Reason, c.ok)
		}
	}
}

// TestArgPaths: what the daemon asks the kernel to resolve, lexically:
// an argument relative to the command's working directory or absolute
// beneath base, beneath an element's root; ".." that climbs out of the
// root, an absolute path outside base, a never-listed name and the
// entries that do not match by their strings ask nothing.
func TestArgPaths(t *testing.T) {
	m := parse(t, execManifest(`[
		["python3", "-m", "pytest", {"path": ["workspace/tests"]}, "-k", {"any": true}],
		["cat", {"rest": {"path": ["workspace/src", "workspace"]}}]
	]`, ""))
	tool := m.Tools["x"]
	const base, cwd = "/srv/agent", "/srv/agent/workspace"
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"python3", "-m", "pytest", "tests/test_calc.py", "-k", "add"}, "3:workspace/tests:test_calc.py"},
		{[]string{"python3", "-m", "pytest", "/srv/agent/workspace/tests/t.py", "-k", "add"}, "3:workspace/tests:t.py"},
		{[]string{"python3", "-m", "pytest", "./tests//a/../t.py", "-k", "add"}, "3:workspace/tests:a/../t.py"},
		{[]string{"python3", "-m", "pytest", "tests", "-k", "add"}, "3:workspace/tests:."},
		{[]string{"python3", "-m", "pytest", "tests/../../secret.txt", "-k", "add"}, ""},
		{[]string{"python3", "-m", "pytest", "tests/../src/calc.py", "-k", "add"}, ""},
		{[]string{"python3", "-m", "pytest", "/etc/passwd", "-k", "add"}, ""},
		{[]string{"python3", "-m", "pytest", "/srv/agent/../agent/workspace/tests/t.py", "-k", "add"}, ""},
		{[]string{"python3", "-m", "pytest", "/srv/agentx/workspace/tests/t.py", "-k", "add"}, ""},
		{[]string{"python3", "-m", "pytest", "tests/.env", "-k", "add"}, ""},
		{[]string{"python3", "-m", "pytest", "tests/test_calc.py", "-x", "add"}, ""}, // strings do not match
		{[]string{"python3", "-m", "pytest", "tests/test_calc.py"}, ""},
		{[]string{"cat", "src/a.py", "../secret.txt", "src/x.pem"}, "1:workspace/src:a.py 1:workspace:src/a.py"},
		{[]string{"cat", "src/../tests/t.py"}, "1:workspace:src/../tests/t.py"},
	} {
		var got []string
		for _, ap := range ArgPaths(tool, c.argv, base, cwd) {
			got = append(got, fmt.Sprintf("%d:%s:%s", ap.Arg, ap.Root, ap.Rel))
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("%q: %q, want %q", c.argv, g, c.want)
		}
	}
	// A relative argument with a working directory outside base names
	// nothing beneath a root.
	if got := ArgPaths(tool, []string{"cat", "workspace/src/a.py"}, base, "/tmp"); len(got) != 0 {
		t.Errorf("cwd /tmp: %v", got)
	}
	// Bounded: one call asks at most MaxArgPaths resolutions.
	argv := []string{"cat"}
	for i := range 3 * MaxArgPaths {
		argv = append(argv, fmt.Sprintf("src/f%d", i))
	}
	if got := ArgPaths(tool, argv, base, cwd); len(got) != MaxArgPaths {
		t.Errorf("%d resolutions, want %d", len(got), MaxArgPaths)
	}
}

// TestArgvOmitted: a call may omit argv only when the tool has one
// literal command.
func TestArgvOmitted(t *testing.T) {
	for _, c := range []struct {
		commands string
		reason   api.Reason
	}{
		{`[["make","test"]]`, api.ReasonAllowed},
		{`[["make",{"any":true}]]`, api.ReasonInvalidArgs},
		{`[["make","test"],["make","lint"]]`, api.ReasonInvalidArgs},
	} {
		m := parse(t, execManifest(c.commands, ""))
		if d := decideArgv(m, nil); d.Reason != c.reason {
			t.Errorf("%s: %s, want %s", c.commands, d.Reason, c.reason)
		}
		schema := LookupOp(api.OpExecute).Schema(m.Tools["x"])
		_, required := schema["required"]
		if required != (c.reason != api.ReasonAllowed) {
			t.Errorf("%s: schema %v", c.commands, schema)
		}
	}
}

// patternErrors are bad patterns and the key that names each: one list
// for the JSON and the TOML loader.
var patternErrors = []struct {
	name, json, toml, key string
}{
	{"unknown key", `[["a",{"globb":"*"}]]`, `[['a', {globb = '*'}]]`, "tools.x.commands[0][1]"},
	{"unknown key in rest", `[["a",{"rest":{"anything":true}}]]`, `[['a', {rest = {anything = true}}]]`, "tools.x.commands[0][1]"},
	{"rest not last", `[["a",{"rest":{"any":true}},"b"]]`, `[['a', {rest = {any = true}}, 'b']]`, "tools.x.commands[0][1]"},
	{"rest first", `[[{"rest":{"any":true}}]]`, `[[{rest = {any = true}}]]`, "tools.x.commands[0][0]"},
	{"rest in rest", `[["a",{"rest":{"rest":{"any":true}}}]]`, `[['a', {rest = {rest = {any = true}}}]]`, "tools.x.commands[0][1]"},
	{"regex does not compile", `[["a"],["b","c",{"regex":"(["}]]`, `[['a'], ['b', 'c', {regex = '(['}]]`, "tools.x.commands[1][2]"},
	{"regex that would break its anchors", `[["a",{"regex":"a)|(.*"}]]`, `[['a', {regex = 'a)|(.*'}]]`, "tools.x.commands[0][1]"},
	{"path root climbs", `[["a",{"path":["../etc"]}]]`, `[['a', {path = ['../etc']}]]`, "tools.x.commands[0][1]"},
	{"path root absolute", `[["a",{"path":["workspace","/etc"]}]]`, `[['a', {path = ['workspace', '/etc']}]]`, "tools.x.commands[0][1]"},
	{"path empty", `[["a",{"path":[]}]]`, `[['a', {path = []}]]`, "tools.x.commands[0][1]"},
	{"two keys", `[["a",{"glob":"*","any":true}]]`, `[['a', {glob = '*', any = true}]]`, "tools.x.commands[0][1]"},
	{"empty object", `[["a",{}]]`, `[['a', {}]]`, "tools.x.commands[0][1]"},
	{"any false", `[["a",{"any":false}]]`, `[['a', {any = false}]]`, "tools.x.commands[0][1]"},
	{"number", `[["a",3]]`, `[['a', 3]]`, "tools.x.commands[0][1]"},
	{"glob not a string", `[["a",{"glob":3}]]`, `[['a', {glob = 3}]]`, "tools.x.commands[0][1]"},
	{"bad glob", `[["a",{"glob":"[x"}]]`, `[['a', {glob = '[x'}]]`, "tools.x.commands[0][1]"},
	{"one_of empty", `[["a",{"one_of":[]}]]`, `[['a', {one_of = []}]]`, "tools.x.commands[0][1]"},
	{"NUL", `[["a","b\u0000"]]`, `[['a', "b\u0000"]]`, "tools.x.commands[0][1]"},
	{"example matches nothing", `[["a",{"one_of":["x","y"]}]],"examples":{"match":[["a","x"],["a","z"]]}`,
		"[['a', {one_of = ['x', 'y']}]]\nexamples = {match = [['a', 'x'], ['a', 'z']]}", "tools.x.examples.match[1]"},
	{"not_match example matches", `[["a",{"rest":{"any":true}}]],"examples":{"not_match":[["b"],["a","-rf"]]}`,
		"[['a', {rest = {any = true}}]]\nexamples = {not_match = [['b'], ['a', '-rf']]}", "tools.x.examples.not_match[1]"},
	{"path example outside", `[["cat",{"path":["workspace/src"]}]],"examples":{"match":[["cat","src/a.py"],["cat","src/../../secret.txt"]]}`,
		"[['cat', {path = ['workspace/src']}]]\nexamples = {match = [['cat', 'src/a.py'], ['cat', 'src/../../secret.txt']]}", "tools.x.examples.match[1]"},
	{"unknown examples key", `[["a"]],"examples":{"matches":[["a"]]}`, "[['a']]\nexamples = {matches = [['a']]}", "tools.x.examples.matches"},
}

// TestCommandPatternErrors: each bad pattern is a load error naming its
// element (or the example that fails), in JSON and in TOML alike.
func TestCommandPatternErrors(t *testing.T) {
	for _, c := range patternErrors {
		t.Run(c.name, func(t *testing.T) {
			doc := `{"schema_version":1,"tools":{"x":{"operation":"execute","mounts":["workspace"],"commands":` + c.json + `}}}`
			_, jerr := Parse(strings.NewReader(doc), "/srv/agent")
			tdoc := "schema_version = 1\n[tools.x]\noperation = 'execute'\nmounts = ['workspace']\ncommands = " + c.toml + "\n"
			_, terr := ParseTOML(strings.NewReader(tdoc), "/srv/agent")
			for what, err := range map[string]error{"JSON": jerr, "TOML": terr} {
				var me *ManifestError
				if !errors.As(err, &me) || me.Key != c.key {
					t.Errorf("%s: %v, want an error naming %s", what, err, c.key)
				}
			}
		})
	}
}

// TestCommandPatternRepeatedKey: a key given twice in an element (JSON
// only: TOML refuses it as it reads) names the element.
func TestCommandPatternRepeatedKey(t *testing.T) {
	doc := `{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["a"],["b",{"glob":"*.py","glob":"*"}]]}}}`
	_, err := Parse(strings.NewReader(doc), "/srv/agent")
	var me *ManifestError
	if !errors.As(err, &me) || me.Key != "tools.x.commands[1][1]" || !strings.Contains(me.Msg, "twice") {
		t.Fatalf("%v", err)
	}
}

// TestCommandExamplesPass: examples that hold load, path elements
// checked lexically.
func TestCommandExamplesPass(t *testing.T) {
	parse(t, execManifest(`[
		["python3", "-m", "pytest", {"path": ["workspace/tests"]}, "-k", {"regex": "[a-z_]+"}],
		["git", {"rest": {"any": true}}]
	]`, `,"examples":{"match":[["python3","-m","pytest","tests/test_calc.py","-k","add"],
		["python3","-m","pytest","/srv/agent/workspace/tests","-k","x"],["git"],["git","log","-1"]],
		"not_match":[["python3","-m","pytest","../secret.txt","-k","add"],["python3","-m","pytest","tests/.env","-k","add"],
		["python3","-m","pytest","/etc/passwd","-k","add"],["python3","-m","pytest","tests/t.py","-k","a;b"],["gitx"]]}`))
}

// TestPatternCanonical: a patterned manifest's canonical form loads
// again with the same policy_version; a literal command keeps the form
// it always had.
func TestPatternCanonical(t *testing.T) {
	m := parse(t, execManifest(`[["a",{"one_of":["x"]},{"glob":"*.py"},{"regex":"a+"},{"path":["workspace"]},{"any":true},{"rest":{"any":true}}],["b","c"]]`,
		`,"examples":{"match":[["b","c"]]}`))
	m2 := parse(t, string(m.Canonical))
	if m2.Version != m.Version {
		t.Fatalf("canonical form does not round-trip:\n%s\n%s", m.Canonical, m2.Canonical)
	}
	if !strings.Contains(string(m.Canonical), `["b","c"]`) {
		t.Errorf("a literal command is not kept as strings: %s", m.Canonical)
	}
	var got []CommandArg
	if err := json.Unmarshal([]byte(`["a",{"rest":{"glob":"*"}}]`), &got); err != nil || PatternString(got) != "a [<glob *> ...]" {
		t.Errorf("%v %q", err, PatternString(got))
	}
}

// FuzzCommandPattern: any element that loads matches without panicking,
// the same after its canonical round trip; what ArgPaths asks the kernel
// to resolve never climbs out of its root and belongs to an argument of
// the argv; and an argument a path element matches is one the kernel
// was asked about.
func FuzzCommandPattern(f *testing.F) {
	for _, s := range [][2]string{
		{`{"glob":"*.py"}`, "a.py"},
		{`{"regex":"[a-z]+"}`, "abc"},
		{`{"one_of":["-n","-i"]}`, "-n"},
		{`{"path":["workspace/src"]}`, "src/../src/a.py"},
		{`{"rest":{"path":["workspace"]}}`, "/srv/agent/workspace/x"},
		{`{"rest":{"any":true}}`, ""},
		{`"lit"`, "lit"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, elem, arg string) {
		doc := `{"schema_version":1,"tools":{"x":{"operation":"execute","mounts":["workspace"],"commands":[["p",` + elem + `]]}}}`
		m, err := Parse(strings.NewReader(doc), "/srv/agent")
		if err != nil {
			return
		}
		m2, err := Parse(strings.NewReader(string(m.Canonical)), "/srv/agent")
		if err != nil || m2.Version != m.Version {
			t.Fatalf("canonical form does not round-trip: %v", err)
		}
		for _, argv := range [][]string{{"p", arg}, {"p", arg, arg}, {"p"}} {
			aps := ArgPaths(m.Tools["x"], argv, "/srv/agent", "/srv/agent/workspace")
			var res []Resource
			for _, ap := range aps {
				if ap.Arg <= 0 || ap.Arg >= len(argv) || climbs(splitPath(ap.Rel, nil)) || path.IsAbs(ap.Rel) {
					t.Fatalf("%q: asked to resolve %+v", argv, ap)
				}
				res = append(res, Resource{Arg: ap.Arg, RootPath: ap.Root, Outcome: OutcomeOK, Rel: ap.Rel, Kind: KindFile})
			}
			d1, d2 := decideArgv(m, argv, res...), decideArgv(m2, argv, res...)
			if d1.Verdict != d2.Verdict || d1.Reason != d2.Reason || d1.Rule != d2.Rule {
				t.Fatalf("%q: %+v after the round trip, %+v before", argv, d2, d1)
			}
			// Nothing resolved: a path element matches no argument.
			el := m.Tools["x"].Commands[0][1]
			if el.Rest != nil {
				el = *el.Rest
			}
			if d := decideArgv(m, argv); d.Allowed() && el.Path != nil && len(argv) > 1 {
				t.Fatalf("%q allowed by a path element with nothing resolved", argv)
			}
		}
	})
}

// BenchmarkDecideExecute: the decision's cost for a literal command, a
// pattern of strings (one_of, regex, glob, rest), and one with a path
// element (its resolution given), each the third entry of its tool.
func BenchmarkDecideExecute(b *testing.B) {
	m := parse(b, execManifest(`[
		["git", "status"], ["make", "lint"],
		["python3", "-m", "unittest", "discover", "-s", "tests", "-v"],
		["grep", {"one_of": ["-n", "-i"]}, {"regex": "[a-z_]{1,32}"}, {"glob": "*.py"}, {"rest": {"glob": "*.py"}}],
		["python3", "-m", "pytest", {"path": ["workspace/tests"]}, "-k", {"regex": "[A-Za-z0-9_]+"}]
	]`, ""))
	for _, c := range []struct {
		name string
		argv []string
		res  []Resource
		rule string
	}{
		{"literal", []string{"python3", "-m", "unittest", "discover", "-s", "tests", "-v"}, nil, "tools.x.commands[2]"},
		{"strings", []string{"grep", "-n", "calc_add", "calc.py", "util.py"}, nil, "tools.x.commands[3]"},
		{"path", []string{"python3", "-m", "pytest", "tests/test_calc.py", "-k", "test_add"},
			[]Resource{okAt(3, "workspace/tests", "test_calc.py")}, "tools.x.commands[4]"},
	} {
		b.Run(c.name, func(b *testing.B) {
			req := &Request{Principal: LocalPrincipal, Tool: "x", Args: &ExecArgs{Argv: c.argv}, Resolved: [][]Resource{c.res}}
			b.ReportAllocs()
			for b.Loop() {
				if d := Decide(m, req); d.Rule != c.rule {
					b.Fatal(d.Reason, d.Rule)
				}
			}
		})
	}
	b.Run("argpaths", func(b *testing.B) {
		argv := []string{"python3", "-m", "pytest", "tests/test_calc.py", "-k", "test_add"}
		b.ReportAllocs()
		for b.Loop() {
			if len(ArgPaths(m.Tools["x"], argv, "/srv/agent", "/srv/agent/workspace")) != 1 {
				b.Fatal("no path")
			}
		}
	})
}
