package authz

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

const readOps = `{"schema_version":1,"tools":{
  "r":{"operation":"read","roots":["ws"],"never":[".env","private/**"]},
  "l":{"operation":"list","roots":["ws"],"never":[".env"]},
  "s":{"operation":"stat","roots":["ws"],"never":[".env"]},
  "q":{"operation":"search","roots":["ws"],"never":[".env","private/**"]}}}`

// TestReadOpsArgs: each read-only operation's args, decoded from a
// request: types are the caller's error (400), rules a decision
// (invalid_args), and the recorded form reads back as the same args.
func TestReadOpsArgs(t *testing.T) {
	m := parse(t, readOps)
	for _, tc := range []struct {
		tool, args string
		typeErr    bool
		invalid    string
	}{
		{"r", `{"path":"ws/a"}`, false, ""},
		{"r", `{"path":"ws/a","offset":3,"limit":10}`, false, ""},
		{"r", `{"path":"ws/a","tail":5}`, false, ""},
		{"r", `{"path":"ws/a","offset":0}`, false, "args.offset: must be at least 1"},
		{"r", `{"path":"ws/a","limit":-1}`, false, "args.limit: must be at least 1"},
		{"r", `{"path":"ws/a","tail":0}`, false, "args.tail: must be at least 1"},
		{"r", `{"path":"ws/a","tail":2,"offset":1}`, false, "args.tail: excludes offset and limit"},
		{"r", `{"offset":1}`, false, "args.path: required"},
		{"r", `{"path":"ws/a","offset":"1"}`, true, ""},
		{"r", `{"path":"ws/a","lines":1}`, true, ""},
		{"l", `{"path":"ws","depth":3,"sizes":true}`, false, ""},
		{"l", `{"path":"ws","depth":0}`, false, "args.depth: from 1 to 16"},
		{"l", `{"path":"ws","depth":17}`, false, "args.depth: from 1 to 16"},
		{"l", `{"path":"ws","sizes":1}`, true, ""},
		{"s", `{"path":"ws/a"}`, false, ""},
		{"s", `{}`, false, "args.path: required"},
		{"s", `{"path":"ws/a","depth":1}`, true, ""},
		{"q", `{"path":"ws","name":"*.go"}`, false, ""},
		{"q", `{"path":"ws","content":"fo+","max_results":5}`, false, ""},
		{"q", `{"path":"ws"}`, false, "args: name, content or both required"},
		{"q", `{"path":"ws","name":"[a"}`, false, "args.name: not a glob ([a)"},
		{"q", `{"path":"ws","name":"a//b"}`, false, "args.name: not a glob (a//b)"},
		{"q", `{"path":"ws","content":"(a"}`, false, "args.content: not an RE2 regular expression: missing closing ): `(a`"},
		{"q", `{"path":"ws","content":"(a)\\1"}`, false, "args.content: not an RE2 regular expression: invalid escape sequence: `\\1`"},
		{"q", `{"path":"ws","name":"x","max_results":0}`, false, "args.max_results: from 1 to 10000"},
		{"q", `{"path":"ws","name":"x","max_results":10001}`, false, "args.max_results: from 1 to 10000"},
	} {
		tl := m.Tools[tc.tool]
		o := LookupOp(tl.Operation)
		a, err := o.DecodeArgs(tl, []byte(tc.args))
		if (err != nil) != tc.typeErr {
			t.Errorf("%s %s: err %v, want type error %t", tc.tool, tc.args, err, tc.typeErr)
			continue
		}
		if err != nil {
			continue
		}
		if a.Invalid != tc.invalid {
			t.Errorf("%s %s: invalid %q, want %q", tc.tool, tc.args, a.Invalid, tc.invalid)
		}
		back, ok := o.ArgsFromRecord(tl, a.Record)
		if !ok || back.Value.Subject() != a.Value.Subject() {
			t.Errorf("%s %s: record %s reads back as %v (%t)", tc.tool, tc.args, a.Record, back.Value, ok)
		}
	}
}

func TestSearchMatchName(t *testing.T) {
	for _, tc := range []struct {
		glob, rel string
		want      bool
	}{
		{"*.go", "a.go", true},
		{"*.go", "dir/sub/a.go", true},
		{"*.go", "a.gox", false},
		{"*.GO", "a.go", false}, // exact, as the file system names it
		{"dir/*.go", "dir/a.go", true},
		{"dir/*.go", "dir/sub/a.go", false},
		{"**/*.go", "a.go", true},
		{"**/*.go", "x/y/a.go", true},
		{"src/**/*_test.go", "src/a/b/c_test.go", true},
		{"src/**/*_test.go", "src/c_test.go", true},
		{"src/**/*_test.go", "lib/c_test.go", false},
		{"src/**", "src/a/b", true},
	} {
		a, invalid := searchArgs(&api.SearchArgs{Path: new(string), Name: tc.glob})
		if invalid != "" {
			t.Fatalf("%s: %s", tc.glob, invalid)
		}
		if got := a.MatchName(tc.rel); got != tc.want {
			t.Errorf("MatchName(%q, %q) = %t, want %t", tc.glob, tc.rel, got, tc.want)
		}
		// A walk filters by base name first: it must keep every match.
		if tc.want && !a.MatchBase(tc.rel[strings.LastIndex(tc.rel, "/")+1:]) {
			t.Errorf("MatchBase(%q) drops %q", tc.glob, tc.rel)
		}
	}
}

func TestReadOpsDecide(t *testing.T) {
	m := parse(t, readOps)
	s := func(v string) *string { return &v }
	for _, tc := range []struct {
		name string
		req  Request
		want api.Reason
	}{
		{"stat file", Request{Tool: "s", Args: &StatArgs{Path: s("ws/a")}, Resolved: [][]Resource{{ok("a", KindFile)}}}, api.ReasonAllowed},
		{"stat dir", Request{Tool: "s", Args: &StatArgs{Path: s("ws/d")}, Resolved: [][]Resource{{ok("d", KindDir)}}}, api.ReasonAllowed},
		{"stat fifo", Request{Tool: "s", Args: &StatArgs{Path: s("ws/f")}, Resolved: [][]Resource{{ok("f", KindFIFO)}}}, api.ReasonAllowed},
		{"stat never", Request{Tool: "s", Args: &StatArgs{Path: s("ws/.env")}}, api.ReasonNeverListed},
		{"stat never resolved", Request{Tool: "s", Args: &StatArgs{Path: s("ws/link")}, Resolved: [][]Resource{{ok(".env", KindFile)}}}, api.ReasonNeverListed},
		{"stat outside", Request{Tool: "s", Args: &StatArgs{Path: s("etc/passwd")}}, api.ReasonOutsideRoots},
		{"stat dotdot", Request{Tool: "s", Args: &StatArgs{Path: s("ws/../etc")}}, api.ReasonOutsideRoots},
		{"stat absolute", Request{Tool: "s", Args: &StatArgs{Path: s("/etc/passwd")}}, api.ReasonInvalidPath},
		{"stat escapes", Request{Tool: "s", Args: &StatArgs{Path: s("ws/out")}, Resolved: [][]Resource{{{Outcome: OutcomeEscapes}}}}, api.ReasonOutsideRoots},
		{"stat symlink fails closed", Request{Tool: "s", Args: &StatArgs{Path: s("ws/l")}, Resolved: [][]Resource{{ok("l", KindSymlink)}}}, api.ReasonUnsupportedFileType},
		{"search dir", Request{Tool: "q", Args: &SearchArgs{Path: s("ws")}, Resolved: [][]Resource{{ok(".", KindDir)}}}, api.ReasonAllowed},
		{"search file", Request{Tool: "q", Args: &SearchArgs{Path: s("ws/a")}, Resolved: [][]Resource{{ok("a", KindFile)}}}, api.ReasonAllowed},
		{"search fifo", Request{Tool: "q", Args: &SearchArgs{Path: s("ws/f")}, Resolved: [][]Resource{{ok("f", KindFIFO)}}}, api.ReasonUnsupportedFileType},
		{"search never dir", Request{Tool: "q", Args: &SearchArgs{Path: s("ws/private")}}, api.ReasonNeverListed},
		{"search never resolved", Request{Tool: "q", Args: &SearchArgs{Path: s("ws/pub")}, Resolved: [][]Resource{{ok("private", KindDir)}}}, api.ReasonNeverListed},
		{"search outside", Request{Tool: "q", Args: &SearchArgs{Path: s("ws/..")}}, api.ReasonOutsideRoots},
		{"list depth dir", Request{Tool: "l", Args: &ListArgs{Path: s("ws"), Depth: 3}, Resolved: [][]Resource{{ok(".", KindDir)}}}, api.ReasonAllowed},
		{"read range", Request{Tool: "r", Args: &ReadArgs{Path: s("ws/a"), Tail: 3}, Resolved: [][]Resource{{ok("a", KindFile)}}}, api.ReasonAllowed},
		{"read args error", Request{Tool: "r", Args: &ReadArgs{Path: s("ws/a")}, ArgsError: "args.tail: excludes offset and limit"}, api.ReasonInvalidArgs},
	} {
		tc.req.Principal = LocalPrincipal
		if d := Decide(m, &tc.req); d.Reason != tc.want {
			t.Errorf("%s: %s (%s), want %s", tc.name, d.Reason, d.Rule, tc.want)
		}
	}
	// Another operation's args fail closed.
	p := "ws/a"
	for tool, a := range map[string]OpArgs{"s": &ReadArgs{Path: &p}, "q": &StatArgs{Path: &p}, "r": &SearchArgs{Path: &p}, "l": &StatArgs{Path: &p}} {
		if d := Decide(m, &Request{Principal: LocalPrincipal, Tool: tool, Args: a, Resolved: [][]Resource{{ok("a", KindFile)}}}); d.Reason != api.ReasonInternalError {
			t.Errorf("tool %s with foreign args: %s", tool, d.Reason)
		}
	}
}

// TestReadOpsHints: stat and search are read-only and idempotent.
func TestReadOpsHints(t *testing.T) {
	for _, name := range []api.Operation{api.OpRead, api.OpList, api.OpStat, api.OpSearch} {
		o := LookupOp(name)
		if o == nil || !o.Hints.ReadOnly || !o.Hints.Idempotent || o.Hints.Destructive || o.Effects {
			t.Errorf("%s: hints %+v", name, o)
		}
	}
}

// TestSearchPrefilter: the whole-file regex matches every file with a
// line that Regexp matches (else a search would miss it).
func TestSearchPrefilter(t *testing.T) {
	lines := []string{"", "line 5", "a", "b", "  x", "xb", "ab", "\r", "€", "foo bar", "bar"}
	for _, pat := range []string{`^line 5$`, `\Aa`, `b\z`, `^$`, `^\s*x`, `(?m)^b$`, `^(a|b)$`, `\bbar\b`, `\Bar`, `^[^a]*$`, `x|^b`, `^.$`} {
		a, invalid := searchArgs(&api.SearchArgs{Path: new(string), Content: pat})
		if invalid != "" || a.Prefilter() == nil {
			t.Fatalf("%s: %s", pat, invalid)
		}
		for i := range lines {
			for j := i; j < len(lines); j++ {
				file := strings.Join(lines[i:j+1], "\n") + "\n"
				any := false
				for _, l := range lines[i : j+1] {
					any = any || a.Regexp().MatchString(l)
				}
				if any && !a.Prefilter().MatchString(file) {
					t.Errorf("%s: prefilter %s misses %q", pat, a.Prefilter(), file)
				}
			}
		}
	}
}
