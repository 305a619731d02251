package authz

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

const seed = `{"schema_version":1,"tools":{"read_file":{"operation":"read","roots":["workspace/src","workspace/tests"],"max_bytes":65536},"run_tests":{"operation":"execute","commands":[["python","-m","unittest"]]}}}`

func parse(t testing.TB, s string) *Manifest {
	t.Helper()
	m, err := Parse(strings.NewReader(s), "/srv/agent")
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return m
}

func TestSeedManifestLoadsUnchanged(t *testing.T) {
	m := parse(t, seed)
	if m.BaseDir != "/srv/agent" || len(m.Tools) != 2 || !strings.HasPrefix(m.Version, "sha256:") || len(m.Version) != 71 {
		t.Fatalf("unexpected %+v", m)
	}
	if m.Tools["run_tests"].EffectivePoolMax() != 2*DefaultPool {
		t.Errorf("default pool_max %d, want twice the pool", m.Tools["run_tests"].EffectivePoolMax())
	}
	if m.Tools["read_file"].EffectiveMaxBytes() != 65536 || m.Tools["run_tests"].EffectivePool() != DefaultPool {
		t.Fatal("defaults")
	}
}

func TestPolicyVersionIsCanonical(t *testing.T) {
	a := parse(t, seed)
	reordered := `{
	  "tools": {
	    "run_tests": {"commands": [["python", "-m", "unittest"]], "operation": "execute"},
	    "read_file": {"max_bytes": 65536, "roots": ["workspace/src", "workspace/tests"], "operation": "read"}
	  },
	  "schema_version": 1
	}`
	if b := parse(t, reordered); a.Version != b.Version {
		t.Fatalf("formatting changed the version: %s vs %s", a.Version, b.Version)
	}
	changed := strings.Replace(seed, "65536", "65535", 1)
	if c := parse(t, changed); c.Version == a.Version {
		t.Fatal("a changed policy kept its version")
	}
}

func TestManifestErrors(t *testing.T) {
	for _, tc := range []struct{ manifest, key string }{
		{`{}`, "schema_version"},
		{`{"schema_version":2,"tools":{}}`, "schema_version"},
		{`{"schema_version":"1","tools":{}}`, "schema_version"},
		{`{"schema_version":1}`, "tools"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"]}},"extra":1}`, `manifest: extra: unknown key (schema_version 1 has no such key; check its spelling: keys are case-sensitive)`},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"],"rootz":[]}}}`, `tools.r.rootz: unknown key`},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","Roots":["a"]}}}`, `tools.r.Roots: unknown key`},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"]},"r":{"operation":"list","roots":["b"]}}}`, `tools.r: given twice; a key appears once`},
		{`{"schema_version":1,"TOOLS":{"r":{"operation":"read","roots":["a"]}}}`, `TOOLS`},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"]}}} {}`, "trailing"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"]}}`, "not valid JSON"},
		{`{"schema_version":1,"tools":{"r":{"operation":"teleport","roots":["a"]}}}`, "tools.r.operation"},
		{`{"schema_version":1,"tools":{"r":{"roots":["a"]}}}`, "tools.r.operation"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read"}}}`, "tools.r.roots"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a","../x"]}}}`, "tools.r.roots[1]"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["/etc"]}}}`, "tools.r.roots[0]"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a/../../b"]}}}`, "tools.r.roots[0]"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":[""]}}}`, "tools.r.roots[0]"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"],"max_bytes":-1}}}`, "tools.r.max_bytes"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"],"max_bytes":"big"}}}`, `manifest: tools.r.max_bytes: a number of bytes, e.g. 65536, not the string "big"`},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"],"approval":"maybe"}}}`, "tools.r.approval"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"],"never":["[x"]}}}`, "tools.r.never[0]"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"],"never":[".env"],"hard_links":"yes"}}}`, "tools.r.hard_links"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"],"hard_links":"allow"}}}`, "tools.r.hard_links"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"],"commands":[["ls"]]}}}`, "tools.r.commands"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"],"pool":1}}}`, "tools.r.pool"},
		{`{"schema_version":1,"tools":{"x":{"operation":"execute"}}}`, "tools.x.commands"},
		{`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[[]]}}}`, "tools.x.commands[0]"},
		{`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"roots":["a"]}}}`, "tools.x.roots"},
		{`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"never":["/abs"]}}}`, "tools.x.never[0]"},
		{`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"mounts":["../etc"]}}}`, "tools.x.mounts[0]"},
		{`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"env":{"A=B":"c"}}}}`, "tools.x.env"},
		{`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"timeout_ms":-5}}}`, "tools.x.timeout_ms"},
		{`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"memory_mb":1}}}`, "tools.x.memory_mb"},
		{`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"pids":1}}}`, "tools.x.pids"},
		{`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"cpus":-1}}}`, "tools.x.cpus"},
		{`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"pool":100}}}`, "tools.x.pool"},
		{`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"pool":4,"pool_max":3}}}`, "tools.x.pool_max"},
		{`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["ls"]],"pool_max":65}}}`, "tools.x.pool_max"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"],"pool_max":1}}}`, "tools.r.pool_max"},
		{`{"schema_version":1,"deny_detail":"verbose","tools":{"r":{"operation":"read","roots":["a"]}}}`, "deny_detail"},
		{`{"schema_version":1,"tools":{"bad name":{"operation":"read","roots":["a"]}}}`, "tools.bad name"},
		{`{"schema_version":1,"principals":{},"tools":{"r":{"operation":"read","roots":["a"]}}}`, "principals"},
		{`{"schema_version":1,"principals":{"p":{"tools":["r"]}},"tools":{"r":{"operation":"read","roots":["a"]}}}`, "principals.p"},
		{`{"schema_version":1,"principals":{"p":{"uids":[1]}},"tools":{"r":{"operation":"read","roots":["a"]}}}`, "principals.p.tools"},
		{`{"schema_version":1,"principals":{"p":{"uids":[1],"tools":["nope"]}},"tools":{"r":{"operation":"read","roots":["a"]}}}`, "principals.p.tools[0]"},
		{`{"schema_version":1,"principals":{"p":{"uids":[1],"tools":["*","r"]}},"tools":{"r":{"operation":"read","roots":["a"]}}}`, "principals.p.tools[0]"},
		{`{"schema_version":1,"principals":{"p":{"uids":[1],"tools":[]},"q":{"uids":[1],"tools":[]}},"tools":{"r":{"operation":"read","roots":["a"]}}}`, "principals.q.uids[0]"},
		{`{"schema_version":1,"principals":{"p":{"uids":[-1],"tools":[]}},"tools":{"r":{"operation":"read","roots":["a"]}}}`, "uids"},
	} {
		_, err := Parse(strings.NewReader(tc.manifest), "/srv")
		if err == nil {
			t.Errorf("%s: accepted", tc.manifest)
			continue
		}
		if !errors.Is(err, ErrInvalidManifest) {
			t.Errorf("%s: error %v is not ErrInvalidManifest", tc.manifest, err)
		}
		if !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: error %q does not name %q", tc.manifest, err, tc.key)
		}
	}
}

func TestBase(t *testing.T) {
	m := parse(t, `{"schema_version":1,"base":"../ws","tools":{"r":{"operation":"read","roots":["a"]}}}`)
	if m.BaseDir != "/srv/ws" {
		t.Fatal(m.BaseDir)
	}
	m = parse(t, `{"schema_version":1,"base":"/data","tools":{"r":{"operation":"read","roots":["a"]}}}`)
	if m.BaseDir != "/data" {
		t.Fatal(m.BaseDir)
	}
}

const multi = `{"schema_version":1,
 "principals":{
   "agent":{"uids":[1000],"tools":["read_file"]},
   "ci":{"gids":[2000],"tools":["*"]},
   "ops":{"uids":[0],"tools":[],"approver":true}},
 "tools":{
   "read_file":{"operation":"read","roots":["ws/src","ws"],"never":[".env","*.pem","private/**","build/*.o"]},
   "ls":{"operation":"list","roots":["."]},
   "deploy":{"operation":"read","roots":["ws"],"approval":"human"},
   "run":{"operation":"execute","commands":[["make","test"],["make","lint"]]},
   "one":{"operation":"execute","commands":[["true"]]}}}`

func ok(rel string, kind api.Kind) Resource {
	return Resource{Outcome: OutcomeOK, Rel: rel, Kind: kind, Path: "/x/" + rel}
}

func linked(r Resource) Resource { r.Links = 2; return r }

func TestDecide(t *testing.T) {
	m := parse(t, multi)
	s := func(v string) *string { return &v }
	for _, tc := range []struct {
		name string
		req  Request
		want api.Reason
		rule string
	}{
		{"unknown tool", Request{Principal: "ci", Tool: "nope"}, api.ReasonUnknownTool, ""},
		{"unmapped peer", Request{Principal: "", Tool: "read_file"}, api.ReasonPrincipalNotAllowed, "principals"},
		{"tool not granted", Request{Principal: "agent", Tool: "ls"}, api.ReasonPrincipalNotAllowed, "principals.agent.tools"},
		{"empty grant", Request{Principal: "ops", Tool: "ls"}, api.ReasonPrincipalNotAllowed, "principals.ops.tools"},
		{"args error", Request{Principal: "ci", Tool: "ls", ArgsError: "x"}, api.ReasonInvalidArgs, "tools.ls"},
		{"no path", Request{Principal: "ci", Tool: "ls"}, api.ReasonInvalidArgs, "tools.ls"},
		{"absolute", Request{Principal: "ci", Tool: "ls", Args: &ListArgs{Path: s("/etc")}}, api.ReasonInvalidPath, "tools.ls"},
		{"outside", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("other/x")}}, api.ReasonOutsideRoots, "tools.read_file.roots"},
		{"unresolved", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/a")}}, api.ReasonInternalError, "tools.read_file"},
		{"allowed second root", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/a")},
			Resolved: [][]Resource{{ok("a", KindFile)}}}, api.ReasonAllowed, "tools.read_file.roots[1]"},
		{"first root wins", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/src/a")},
			Resolved: [][]Resource{{ok("a", KindFile), ok("src/a", KindFile)}}}, api.ReasonAllowed, "tools.read_file.roots[0]"},
		{"not found in one, found in other", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/src/a")},
			Resolved: [][]Resource{{{Outcome: OutcomeNotFound}, ok("src/a", KindFile)}}}, api.ReasonAllowed, "tools.read_file.roots[1]"},
		{"most specific failure", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/src/a")},
			Resolved: [][]Resource{{{Outcome: OutcomeEscapes}, {Outcome: OutcomeNotFound}}}}, api.ReasonNotFound, "tools.read_file.roots[1]"},
		{"escapes", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/a")},
			Resolved: [][]Resource{{{Outcome: OutcomeEscapes}}}}, api.ReasonOutsideRoots, "tools.read_file.roots[1]"},
		{"resolver error fails closed", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/a")},
			Resolved: [][]Resource{{{Outcome: OutcomeError}}}}, api.ReasonInternalError, "tools.read_file.roots[1]"},
		{"never requested", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/.env")}}, api.ReasonNeverListed, "tools.read_file.never[0]"},
		{"never nested glob", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/build/x.o")}}, api.ReasonNeverListed, "tools.read_file.never[3]"},
		{"never not nested deeper", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/a/build/x.o")},
			Resolved: [][]Resource{{ok("a/build/x.o", KindFile)}}}, api.ReasonAllowed, "tools.read_file.roots[1]"},
		{"never resolved", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/innocent")},
			Resolved: [][]Resource{{ok("private/k", KindFile)}}}, api.ReasonNeverListed, "tools.read_file.never[2]"},
		{"never ancestor dir", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/x")},
			Resolved: [][]Resource{{ok("private", KindDir)}}}, api.ReasonNeverListed, "tools.read_file.never[2]"},
		{"read dir", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/d")},
			Resolved: [][]Resource{{ok("d", KindDir)}}}, api.ReasonNotAFile, "tools.read_file.roots[1]"},
		// A hard link's other names cannot be checked (docs/security.md,
		// "The third review").
		{"hard link under never", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/innocent")},
			Resolved: [][]Resource{{linked(ok("innocent", KindFile))}}}, api.ReasonUnsupportedFileType, "tools.read_file.hard_links"},
		{"hard link without never", Request{Principal: "ci", Tool: "deploy", Args: &ReadArgs{Path: s("ws/a")},
			Resolved: [][]Resource{{linked(ok("a", KindFile))}}}, api.ReasonApprovalRequired, "tools.deploy.approval"},
		{"read fifo", Request{Principal: "agent", Tool: "read_file", Args: &ReadArgs{Path: s("ws/f")},
			Resolved: [][]Resource{{ok("f", KindFIFO)}}}, api.ReasonUnsupportedFileType, "tools.read_file.roots[1]"},
		{"list file", Request{Principal: "ci", Tool: "ls", Args: &ListArgs{Path: s("f")},
			Resolved: [][]Resource{{ok("f", KindFile)}}}, api.ReasonNotADirectory, "tools.ls.roots[0]"},
		{"list base root", Request{Principal: "ci", Tool: "ls", Args: &ListArgs{Path: s(".")},
			Resolved: [][]Resource{{ok(".", KindDir)}}}, api.ReasonAllowed, "tools.ls.roots[0]"},
		{"approval", Request{Principal: "ci", Tool: "deploy", Args: &ReadArgs{Path: s("ws/a")},
			Resolved: [][]Resource{{ok("a", KindFile)}}}, api.ReasonApprovalRequired, "tools.deploy.approval"},
		{"argv allowed", Request{Principal: "ci", Tool: "run", Args: &ExecArgs{Argv: []string{"make", "lint"}}}, api.ReasonAllowed, "tools.run.commands[1]"},
		{"argv not allowed", Request{Principal: "ci", Tool: "run", Args: &ExecArgs{Argv: []string{"make", "lint", "; rm"}}}, api.ReasonCommandNotAllowed, "tools.run.commands"},
		{"argv prefix", Request{Principal: "ci", Tool: "run", Args: &ExecArgs{Argv: []string{"make"}}}, api.ReasonCommandNotAllowed, "tools.run.commands"},
		{"argv omitted, several", Request{Principal: "ci", Tool: "run"}, api.ReasonInvalidArgs, "tools.run.commands"},
		{"argv omitted, one", Request{Principal: "ci", Tool: "one"}, api.ReasonAllowed, "tools.one.commands[0]"},
		{"argv empty", Request{Principal: "ci", Tool: "one", Args: &ExecArgs{Argv: []string{}}}, api.ReasonCommandNotAllowed, "tools.one.commands"},
	} {
		d := Decide(m, &tc.req)
		if d.Reason != tc.want || d.Rule != tc.rule {
			t.Errorf("%s: got %s (%s), want %s (%s)", tc.name, d.Reason, d.Rule, tc.want, tc.rule)
		}
		if d.Allowed() != (tc.want == api.ReasonAllowed) {
			t.Errorf("%s: allow=%t with reason %s", tc.name, d.Allowed(), d.Reason)
		}
	}
	if (Decision{}).Allowed() || (Decision{}).WireVerdict() != api.VerdictDeny {
		t.Fatal("the zero Decision must deny")
	}
	if d := Decide(nil, &Request{}); d.Allowed() {
		t.Fatal("nil manifest allowed")
	}
}

func TestIdentify(t *testing.T) {
	m := parse(t, multi)
	for _, tc := range []struct {
		uid, gid uint32
		want     string
		ok       bool
	}{{1000, 2000, "agent", true}, {5, 2000, "ci", true}, {0, 0, "ops", true}, {5, 5, "", false}} {
		n, ok := m.Identify(Caller{UID: tc.uid, GID: tc.gid, Cgroup: "/user.slice"})
		if n != tc.want || ok != tc.ok {
			t.Errorf("Identify(%d,%d) = %q,%t", tc.uid, tc.gid, n, ok)
		}
	}
	if !m.IsApprover("ops", 0) || m.IsApprover("agent", 1000) {
		t.Fatal("approver")
	}
	local := parse(t, seed)
	if n, _ := local.Identify(Caller{UID: 1234, GID: 1234}); n != LocalPrincipal || local.IsApprover(n, 1234) || !local.IsApprover(n, 0) {
		t.Fatal("local principal")
	}
	if got := m.ToolNames("agent"); len(got) != 1 || got[0] != "read_file" {
		t.Fatal(got)
	}
}

func TestMatchRoots(t *testing.T) {
	tool := &Tool{Roots: []string{"ws/src", "ws", "./ws/src/"}}
	for _, tc := range []struct {
		path string
		want string
	}{
		{"ws/src/a", "0:a 1:src/a 2:a"},
		{"ws//./src/a", "0:a 1:src/a 2:a"},
		{"ws/src", "0:. 1:src 2:."},
		{"ws/srcx/a", "1:srcx/a"},
		{"ws/src/../b", "1:src/../b"},
		{"ws/../ws/src/a", ""},
		{"ws/src/a/../../..", ""},
		{"other", ""},
	} {
		var parts []string
		for _, m := range MatchRoots(tool, tc.path) {
			parts = append(parts, fmt.Sprintf("%d:%s", m.Index, m.Rel))
		}
		if got := strings.Join(parts, " "); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.path, got, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(seed)
	f.Add(multi)
	f.Add(`{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["a"]],"pool":0,"env":{"A":"b"}}}}`)
	f.Add(`{"schema_version":1,"tools":{"x":{"operation":"execute","mounts":["w"],"commands":[["a",{"one_of":["-n"]},{"regex":"[a-z]+"},{"glob":"*.py"},{"path":["w"]},{"rest":{"any":true}}]],"examples":{"match":[["a","-n","b","c.py","w/x"]]}}}}`)
	f.Add(`{"schema_version":1,"tools":{"x":{"operation":"execute","mounts":["w"],"commands":[["a"]],"never":[".env"],"writes":{"roots":["w/s"],"never":["*.pem"],"keep":["*.py"],"commit":"auto"},"cache":["/root/.cache"],"cache_mb":8}}}`)
	f.Fuzz(func(t *testing.T, s string) {
		m, err := Parse(strings.NewReader(s), "/b")
		if err != nil {
			return
		}
		// A manifest that loads re-loads from its canonical form with the
		// same version, and Decide never panics on it.
		m2, err := Parse(strings.NewReader(string(m.Canonical)), "/b")
		if err != nil || m2.Version != m.Version {
			t.Fatalf("canonical form does not round-trip: %v", err)
		}
		for name := range m.Tools {
			a, _ := LookupOp(m.Tools[name].Operation).ArgsFromRecord(m.Tools[name], []byte(`{"path":"x"}`))
			r := a.Request(LocalPrincipal, name)
			Decide(m, &r)
			if wt := m.Tools[name].WritesTool(); wt != nil {
				DecideChange(wt, ChangeCreate, "w/s/x", []Resource{{Outcome: OutcomeOK, Kind: KindAbsent}})
				m.Tools[name].Writes.Keeps("w/s/x")
			}
		}
	})
}

func BenchmarkDecide(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"schema_version":1,"tools":{`)
	for i := range 50 {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `"tool%02d":{"operation":"read","roots":["ws/src%d","ws/tests%d"],"never":[".env","*.pem","private/**"]}`, i, i, i)
	}
	sb.WriteString(`}}`)
	m := parse(b, sb.String())
	path := "ws/src37/pkg/module/file.py"
	req := &Request{Principal: LocalPrincipal, Tool: "tool37", Args: &ReadArgs{Path: &path},
		Resolved: [][]Resource{{{Outcome: OutcomeOK, Rel: "pkg/module/file.py", Kind: KindFile, Path: "/b/ws/src37/pkg/module/file.py"}}}}
	b.ReportAllocs()
	for b.Loop() {
		if d := Decide(m, req); !d.Allowed() {
			b.Fatal(d.Reason)
		}
	}
}

// TestResolvedRecordShapes: a decision record keeps a one-target
// operation's resolutions as the flat list every earlier record has (so
// replay reads old ledgers), and an operation of two targets by name; a
// URL's by its recorded form.
func TestResolvedRecordShapes(t *testing.T) {
	r := Resource{Root: 1, RootPath: "ws", Outcome: OutcomeOK, Rel: "a", Kind: KindFile, Path: "/b/ws/a"}
	one := opRead.RecordResolved([][]Resource{{r}})
	if want := mustJSON([]Resource{r}); string(one) != string(want) {
		t.Fatalf("one target recorded as %s, want %s", one, want)
	}
	if got := opRead.ResolvedFromRecord(one); len(got) != 1 || len(got[0]) != 1 || !reflect.DeepEqual(got[0][0], r) {
		t.Fatalf("one target read back as %+v", got)
	}
	if opRead.RecordResolved([][]Resource{nil}) != nil || opRead.RecordResolved(nil) != nil {
		t.Fatal("nothing resolved must record nothing")
	}
	move := &Op{Targets: []Target{{Name: "path", Resolve: ResolveExisting}, {Name: "to", Resolve: ResolveParent}}}
	to := Resource{Root: 0, RootPath: "ws", Outcome: OutcomeOK, Rel: "b", Kind: KindAbsent, Path: "/b/ws/b"}
	two := move.RecordResolved([][]Resource{{r}, {to}})
	if !strings.Contains(string(two), `"path":[`) || !strings.Contains(string(two), `"to":[`) {
		t.Fatalf("two targets recorded as %s", two)
	}
	got := move.ResolvedFromRecord(two)
	if len(got) != 2 || len(got[0]) != 1 || !reflect.DeepEqual(got[0][0], r) || len(got[1]) != 1 || !reflect.DeepEqual(got[1][0], to) {
		t.Fatalf("two targets read back as %+v", got)
	}
	if got := move.ResolvedFromRecord(one); len(got) != 2 || len(got[0]) != 1 || got[1] != nil {
		t.Fatalf("a flat record read for two targets: %+v", got)
	}
	u := Resource{Outcome: OutcomeOK, Path: "https://api.example/v1?key=SECRET123", Addrs: []string{"192.0.2.1"}}
	if rec := opFetch.RecordResolved([][]Resource{{u}}); strings.Contains(string(rec), "SECRET123") {
		t.Fatalf("a URL target's query value recorded: %s", rec)
	}
}

// TestForeignArgsFailClosed: each operation reads only its own args
// type; another operation's is denied internal_error, never decided as
// if it were its own.
func TestForeignArgsFailClosed(t *testing.T) {
	m := parse(t, `{"schema_version":1,"tools":{
	  "r":{"operation":"read","roots":["ws"]}, "l":{"operation":"list","roots":["ws"]},
	  "w":{"operation":"write","roots":["ws"]}, "d":{"operation":"delete","roots":["ws"]},
	  "x":{"operation":"execute","commands":[["true"]]},
	  "e":{"operation":"edit","roots":["ws"]}, "m":{"operation":"move","roots":["ws"]}, "k":{"operation":"mkdir","roots":["ws"]},
	  "f":{"operation":"fetch","hosts":["api.example"]}, "p":{"operation":"post","webhooks":["https://hooks.example/h"]}}}`)
	p, u := "ws/a", "https://api.example/"
	ok := []Resource{{Outcome: OutcomeOK, Rel: "a", Kind: KindFile, Path: "/b/ws/a"}}
	all := map[string]OpArgs{"r": &ReadArgs{Path: &p}, "l": &ListArgs{Path: &p}, "w": &WriteArgs{Path: &p, Mode: ModeCreateOrOverwrite},
		"d": &DeleteArgs{Path: &p}, "e": &EditArgs{Path: &p}, "m": &MoveArgs{Path: &p, To: &p}, "k": &MkdirArgs{Path: &p},
		"x": &ExecArgs{Argv: []string{"true"}}, "f": &FetchArgs{URL: &u, Method: "GET"}, "p": &PostArgs{URL: &u}}
	for tool := range all {
		for other, a := range all {
			if d := Decide(m, &Request{Principal: LocalPrincipal, Tool: tool, Args: a, Resolved: [][]Resource{ok, ok}}); other != tool && d.Reason != api.ReasonInternalError {
				t.Errorf("tool %s with %s's args: %s (%s), want internal_error", tool, other, d.Reason, d.Rule)
			}
		}
	}
}

// TestHintsAgreeWithEffects: an operation that says it is read-only
// destroys nothing and changes no file; one that changes files beneath its
// roots says it is destructive (the hints /v1/tools and sluice mcp publish
// come from here alone). A fetch has effects (it leaves the host) and is
// still read-only, as MCP means it.
func TestHintsAgreeWithEffects(t *testing.T) {
	for _, o := range ops {
		h := o.Hints
		if h.ReadOnly && (h.Destructive || o.WritesRoots()) {
			t.Errorf("%s: read-only hint but destructive %v, writes roots %v", o.Name, h.Destructive, o.WritesRoots())
		}
		// mkdir adds a name and destroys nothing: the one operation that
		// changes its roots and is not destructive.
		if o.WritesRoots() && !h.Destructive && o.Name != api.OpMkdir {
			t.Errorf("%s: changes files beneath its roots but is not destructive", o.Name)
		}
	}
}

// TestNetTargetDecided: a fetch's or post's URL is authorized once, when
// the daemon resolves it (Op.NetTarget), into the request the executor
// sends; Decide checks that target with the addresses beside it and hands
// it on in the decision's resource, and decides a request without one
// (replay: the recorded URL and addresses) the same way. A target made
// for other args is refused (internal_error); a refused URL is denied
// naming the key that refused it, and its resolution is not recorded.
func TestNetTargetDecided(t *testing.T) {
	m := parse(t, `{"schema_version":1,"tools":{
	  "f":{"operation":"fetch","hosts":["api.example"],"allowed_headers":["Accept"]},
	  "p":{"operation":"post","webhooks":["https://hooks.example/h/*"],"max_request_bytes":8}}}`)
	addrs := []string{"140.82.112.6"}
	decide := func(tool, args string, withTarget bool) (Decision, *NetTarget) {
		t.Helper()
		tl := m.Tools[tool]
		o := LookupOp(tl.Operation)
		a, err := o.DecodeArgs(tl, []byte(args))
		if err != nil || a.Invalid != "" {
			t.Fatalf("%s: %v %s", args, err, a.Invalid)
		}
		res := Resource{Outcome: OutcomeOK, Addrs: addrs}
		var nt *NetTarget
		if withTarget {
			nt = o.NetTarget(tl, a.Value)
			res.Net = nt
			if nt.Refused() {
				res = Resource{Outcome: OutcomeRefused, Net: nt}
			}
		}
		return Decide(m, &Request{Principal: LocalPrincipal, Tool: tool, Args: a.Value, Resolved: [][]Resource{{res}}}), nt
	}
	for _, c := range []struct {
		tool, args string
		reason     api.Reason
		rule       string
	}{
		{"f", `{"url":"https://api.example/v1?q=1","headers":{"accept":"text/plain"}}`, api.ReasonAllowed, "tools.f.hosts[0]"},
		{"f", `{"url":"https://api.example/v1","method":"HEAD"}`, api.ReasonAllowed, "tools.f.hosts[0]"},
		{"f", `{"url":"https://evil.example/"}`, api.ReasonEgressDenied, "tools.f.hosts"},
		{"f", `{"url":"https://api.example@evil.example/"}`, api.ReasonEgressDenied, "tools.f.hosts"},
		{"f", `{"url":"https://api.example/","headers":{"Authorization":"x"}}`, api.ReasonEgressDenied, "tools.f.allowed_headers"},
		{"p", `{"url":"https://hooks.example/h/x","body":{}}`, api.ReasonAllowed, "tools.p.webhooks[0]"},
		{"p", `{"url":"https://hooks.example/h/..;/x","body":{}}`, api.ReasonEgressDenied, "tools.p.webhooks"},
		{"p", `{"url":"https://hooks.example/h/x","body":{"long":1}}`, api.ReasonLimitExceeded, "tools.p.max_request_bytes"},
	} {
		d, nt := decide(c.tool, c.args, true)
		if d.Reason != c.reason || d.Rule != c.rule {
			t.Errorf("%s %s: %s (%s), want %s (%s)", c.tool, c.args, d.Reason, d.Rule, c.reason, c.rule)
		}
		if d.Allowed() && (d.Resource == nil || d.Resource.Net != nt || nt.Request.Target().Host == "") {
			t.Errorf("%s: the decision does not carry the target it checked", c.args)
		}
		if nt.Refused() {
			if rec := LookupOp(m.Tools[c.tool].Operation).RecordResolved([][]Resource{{{Outcome: OutcomeRefused, Net: nt}}}); rec != nil {
				t.Errorf("%s: a refused URL's resolution recorded: %s", c.args, rec)
			}
		}
		if r, _ := decide(c.tool, c.args, false); r.Reason != d.Reason || r.Rule != d.Rule {
			t.Errorf("%s without a target (replay): %s (%s), want %s (%s)", c.args, r.Reason, r.Rule, d.Reason, d.Rule)
		}
	}
	// A target made for other args than the request's.
	tl := m.Tools["f"]
	a1, _ := opFetch.DecodeArgs(tl, []byte(`{"url":"https://api.example/a"}`))
	a2, _ := opFetch.DecodeArgs(tl, []byte(`{"url":"https://api.example/b"}`))
	res := Resource{Outcome: OutcomeOK, Addrs: addrs, Net: opFetch.NetTarget(tl, a1.Value)}
	if d := Decide(m, &Request{Principal: LocalPrincipal, Tool: "f", Args: a2.Value, Resolved: [][]Resource{{res}}}); d.Reason != api.ReasonInternalError {
		t.Errorf("a target made for other args: %s, want internal_error", d.Reason)
	}
}
