package authz

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// goldenJSON is a manifest a person wrote, with its lines as they are.
const goldenJSON = `{
  "schema_version": 1,
  "tools": {
    "read_file": {
      "operation": "read",
      "roots": ["workspace/src"]
    },
    "run_tests": {
      "operation": "execute",
      "commands": [["python", "-m", "unittest"]],
      "timeout_ms": %s
    }
  }
}
`

// TestManifestErrorsGolden: each error from a file names the file, the
// line and column, the full key path, and the fix in the manifest's
// words, exactly.
func TestManifestErrorsGolden(t *testing.T) {
	golden := func(v string) string { return strings.Replace(goldenJSON, "%s", v, 1) }
	for _, c := range []struct{ name, file, doc, want string }{
		{"type, JSON", "manifest.json", golden(`"20s"`),
			`manifest.json:11:21: tools.run_tests.timeout_ms: a number of milliseconds, e.g. 20000, not the string "20s"`},
		{"a fraction", "manifest.json", golden(`1.5`),
			`manifest.json:11:21: tools.run_tests.timeout_ms: a number of milliseconds, e.g. 20000, not the number 1.5`},
		{"a list", "manifest.json", golden(`[1]`),
			`manifest.json:11:21: tools.run_tests.timeout_ms: a number of milliseconds, e.g. 20000, not a list`},
		{"trailing comma", "manifest.json", strings.Replace(golden(`20000`), `"roots": ["workspace/src"]`, `"roots": ["workspace/src"],`, 1),
			`manifest.json:6:33: not valid JSON: a comma before }; JSON has none after the last element, remove it`},
		{"trailing comma in a list", "manifest.json", strings.Replace(golden(`20000`), `["workspace/src"]`, `["workspace/src",]`, 1),
			`manifest.json:6:32: not valid JSON: a comma before ]; JSON has none after the last element, remove it`},
		{"cut short", "manifest.json", strings.TrimSpace(golden(`20000`))[:60],
			`manifest.json:5:4: not valid JSON: the document ends early; a } or ] is missing`},
		{"bad byte", "manifest.json", strings.Replace(golden(`20000`), `"operation": "read"`, `"operation": read`, 1),
			`manifest.json:5:20: not valid JSON: invalid character 'r' looking for beginning of value`},
		{"not an object", "m.json", "\n [1]",
			`m.json:2:2: the manifest is a JSON object ({"schema_version": 1, …}), not a list`},
		{"unknown key", "manifest.json", strings.Replace(golden(`20000`), `"timeout_ms"`, `"timeout"`, 1),
			`manifest.json:11:7: tools.run_tests.timeout: unknown key (schema_version 1 has no such key; check its spelling: keys are case-sensitive)`},
		{"validation", "manifest.json", strings.Replace(golden(`20000`), `"workspace/src"`, `"../src"`, 1),
			`manifest.json:6:17: tools.read_file.roots[0]: "../src" leaves base; name a directory beneath base`},
		{"negative", "manifest.json", golden(`-5`),
			`manifest.json:11:21: tools.run_tests.timeout_ms: `},
		{"a tool not an object", "manifest.json", `{"schema_version":1,"tools":{"r":"read"}}`,
			`manifest.json:1:34: tools.r: an object (a table), not the string "read"`},
		{"a principal's tools", "manifest.json", `{"schema_version":1,"principals":{"p":{"uids":[1],"tools":"*"}},"tools":{"r":{"operation":"read","roots":["a"]}}}`,
			`manifest.json:1:59: principals.p.tools: a list of tool names, e.g. ["read_file"], or ["*"] for all, not the string "*"`},
		{"a uid", "manifest.json", `{"schema_version":1,"principals":{"p":{"uids":[-1],"tools":[]}},"tools":{"r":{"operation":"read","roots":["a"]}}}`,
			`manifest.json:1:48: principals.p.uids[0]: a whole number from 0 to 4294967295, not the number -1`},
		{"an env value", "manifest.json", `{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"env":{"pool":1}}}}`,
			`manifest.json:1:91: tools.x.env.pool: a string, not the number 1`},
		{"an argv pattern", "manifest.json", `{"schema_version":1,"tools":{"x":{"operation":"execute","commands":["ls"]}}}`,
			`manifest.json:1:69: tools.x.commands[0]: an argv pattern, a list such as ["python", "-m", "unittest"], not the string "ls"`},

		{"type, TOML", "manifest.toml", "schema_version = 1\n[tools.run_tests]\noperation = 'execute'\ncommands = [['make']]\ntimeout_ms = '20s'\n",
			`manifest.toml:5: tools.run_tests.timeout_ms: a number of milliseconds, e.g. 20000, not the string "20s"`},
		{"commands, TOML", "manifest.toml", "schema_version = 1\n[tools.x]\noperation = 'execute'\ncommands = ['make', 'test']\n",
			`manifest.toml:4: tools.x.commands[0]: an argv pattern, a list such as ["python", "-m", "unittest"], not the string "make"`},
		{"env, TOML", "manifest.toml", "schema_version = 1\n[tools.x]\noperation = 'execute'\ncommands = [['make']]\nenv = ['A=b']\n",
			`manifest.toml:5: tools.x.env: an object (a table) of variable names to strings, e.g. {"LANG": "C.UTF-8"}, not a list`},
		{"syntax, TOML", "manifest.toml", "schema_version = 1\n[tools.x]\noperation = 'execute',\n",
			`manifest.toml:3:22: expected newline but got U+002C ','`},
		{"unknown key, TOML", "manifest.toml", "schema_version = 1\n[tools.x]\noperation = 'read'\nroots = ['a']\nrootz = ['b']\n",
			`manifest.toml:5: tools.x.rootz: unknown key (schema_version 1 has no such key; check its spelling: keys are case-sensitive)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseFile(c.file, strings.NewReader(c.doc), "/base")
			if err == nil {
				t.Fatal("accepted")
			}
			if got := err.Error(); got != c.want && !(strings.HasSuffix(c.want, ": ") && strings.HasPrefix(got, c.want)) {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// goTypeName is what no manifest error may say: a Go type.
var goTypeName = regexp.MustCompile(`int64|int32|uint32|float64|\[\]string|map\[|authz\.|api\.|struct|Go value`)

// TestNoGoTypeNames: a value of the wrong kind for any key of a tool, a
// principal or the top, in JSON or TOML, is refused in manifest words.
func TestNoGoTypeNames(t *testing.T) {
	wrong := []string{`"s"`, `1.5`, `true`, `[1]`, `{"a":1}`, `-1`}
	check := func(doc string) {
		t.Helper()
		for _, parse := range []func() error{
			func() error { _, err := ParseFile("m.json", strings.NewReader(doc), "/base"); return err },
		} {
			err := parse()
			if err == nil {
				continue
			}
			if msg := err.Error(); goTypeName.MatchString(msg) {
				t.Errorf("%s:\n%s", doc, msg)
			}
		}
	}
	for _, f := range reflect.VisibleFields(reflect.TypeOf(Tool{})) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		for _, w := range wrong {
			check(`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"` + name + `":` + w + `}}}`)
			check(`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"` + name + `":[` + w + `]}}}`)
			check(`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"writes":{"` + name + `":` + w + `}}}}`)
		}
	}
	for _, k := range []string{"uids", "gids", "tools", "approver"} {
		for _, w := range wrong {
			check(`{"schema_version":1,"principals":{"p":{"` + k + `":` + w + `}},"tools":{"r":{"operation":"read","roots":["a"]}}}`)
		}
	}
	for _, k := range []string{"base", "deny_detail", "principals", "tools"} {
		for _, w := range wrong {
			check(`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"]}},"` + k + `":` + w + `}`)
		}
	}
}

// TestArgsDetail: an execute call without argv, on a tool with several
// commands (or one pattern), is told that argv is required.
func TestArgsDetail(t *testing.T) {
	m, err := Parse(strings.NewReader(`{"schema_version":1,"tools":{
		"three":{"operation":"execute","commands":[["make","test"],["make","lint"],["go","vet"]]},
		"pattern":{"operation":"execute","commands":[["make",{"one_of":["test","lint"]}]]},
		"one":{"operation":"execute","commands":[["make","test"]]},
		"r":{"operation":"read","roots":["a"]}}}`), "/base")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tool string
		args OpArgs
		bad  string
		want string
	}{
		{"three", &ExecArgs{}, "", "argv is required: this tool has 3 command patterns; see sluice tools --json"},
		{"pattern", &ExecArgs{}, "", "argv is required: this tool has 1 command pattern, not a literal argv; see sluice tools --json"},
		{"one", &ExecArgs{}, "", ""},
		{"three", &ExecArgs{Argv: []string{"make", "test"}}, "", ""},
		{"r", &ReadArgs{}, "args.path: required", "args.path: required"},
	} {
		req := &Request{Principal: "local", Tool: c.tool, Args: c.args, ArgsError: c.bad}
		d := Decide(m, req)
		if got := ArgsDetail(m.Tools[c.tool], req, d); got != c.want {
			t.Errorf("%s %+v: %s, detail %q, want %q", c.tool, c.args, d.Reason, got, c.want)
		}
	}
}

// FuzzManifestErrorPlace: whatever the document, ParseFile does not
// panic or hang, and the place an error names is in the document.
func FuzzManifestErrorPlace(f *testing.F) {
	f.Add(strings.Replace(goldenJSON, "%s", `"20s"`, 1))
	f.Add(`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a",]}}}`)
	f.Add(`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"]}}} {"x":}`)
	f.Add(`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["a",{"glob":1}]]}}}`)
	f.Fuzz(func(t *testing.T, doc string) {
		_, err := ParseFile("m.json", strings.NewReader(doc), "/base")
		var me *ManifestError
		if err == nil || !errors.As(err, &me) || me.Line == 0 {
			return
		}
		lines := strings.Count(doc, "\n") + 1
		if me.Line > lines || me.Col < 1 {
			t.Fatalf("%q: %v: line %d of %d, column %d", doc, err, me.Line, lines, me.Col)
		}
	})
}
