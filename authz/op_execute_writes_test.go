package authz

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"

	"github.com/sluicehq/sluice/api"
)

// execTool is a manifest of one execute tool "x" mounting workspace,
// with extra keys (a JSON object's members) added to it.
func execTool(extra string) string {
	return `{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["make"]],"mounts":["workspace"]` + extra + `}}}`
}

// asTOML is doc (JSON) written as TOML, as the twin fuzz writes it.
func asTOML(t *testing.T, doc string) []byte {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(doc))
	d.UseNumber()
	var tree any
	if err := d.Decode(&tree); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	native, ok := tomlNative(tree)
	if !ok {
		t.Fatalf("%s: TOML cannot hold it", doc)
	}
	tm, err := toml.Marshal(native)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// TestWritesCacheManifestErrors: each mistake in writes and cache is
// refused at load naming its key, in JSON and in TOML alike.
func TestWritesCacheManifestErrors(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		key, msg  string
		jsonOnly  bool // TOML cannot spell it
	}{
		// writes and cache belong to execute tools.
		{"writes on a read tool", `{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"],"writes":{"roots":["a"]}}}}`,
			"tools.r.writes", "does not apply to read tools; it applies to execute tools", false},
		{"cache on a write tool", `{"schema_version":1,"tools":{"w":{"operation":"write","roots":["a"],"cache":["/root/.cache"]}}}`,
			"tools.w.cache", "does not apply to write tools", false},
		{"cache_mb on a read tool", `{"schema_version":1,"tools":{"r":{"operation":"read","roots":["a"],"cache_mb":5}}}`,
			"tools.r.cache_mb", "does not apply to read tools", false},
		// writes' keys, spelled exactly.
		{"unknown writes key", execTool(`,"writes":{"roots":["workspace"],"rootz":[]}`), "tools.x.writes.rootz", "unknown key", false},
		{"writes key in another case", execTool(`,"writes":{"Roots":["workspace"]}`), "tools.x.writes.Roots", "unknown key", false},
		{"writes key twice", execTool(`,"writes":{"roots":["workspace"],"roots":["workspace"]}`), "tools.x.writes.roots", "given twice", true},
		{"writes max_files a string", execTool(`,"writes":{"roots":["workspace"],"max_files":"lots"}`), "tools.x.writes.max_files", `a number of files, e.g. 100, not the string "lots"`, false},
		{"writes not an object", execTool(`,"writes":["workspace"]`), "tools.x.writes", "an object (a table) such as {\"roots\": [\"workspace\"], \"commit\": \"approval\"}, not a list", false},
		// writes.roots.
		{"writes without roots", execTool(`,"writes":{"commit":"auto"}`), "tools.x.writes.roots", "missing or empty", false},
		{"writes with empty roots", execTool(`,"writes":{"roots":[]}`), "tools.x.writes.roots", "missing or empty", false},
		{"root leaves base", execTool(`,"writes":{"roots":["workspace","../x"]}`), "tools.x.writes.roots[1]", `"../x" leaves base`, false},
		{"root absolute", execTool(`,"writes":{"roots":["/srv/workspace"]}`), "tools.x.writes.roots[0]", "is absolute", false},
		{"root empty", execTool(`,"writes":{"roots":[""]}`), "tools.x.writes.roots[0]", "is empty", false},
		{"root trailing slash", execTool(`,"writes":{"roots":["workspace/src/"]}`), "tools.x.writes.roots[0]", `is not clean; write it "workspace/src"`, false},
		{"root dot component", execTool(`,"writes":{"roots":["workspace/./src"]}`), "tools.x.writes.roots[0]", "is not clean", false},
		{"root dot-dot inside", execTool(`,"writes":{"roots":["workspace/a/../src"]}`), "tools.x.writes.roots[0]", `is not clean; write it "workspace/src"`, false},
		{"root beside the mount", execTool(`,"writes":{"roots":["other"]}`), "tools.x.writes.roots[0]", "lies beneath none of mounts", false},
		{"root above the mount", `{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["make"]],"mounts":["workspace/src"],"writes":{"roots":["workspace"]}}}}`,
			"tools.x.writes.roots[0]", "lies beneath none of mounts", false},
		{"root shares a prefix only", execTool(`,"writes":{"roots":["workspacex/a"]}`), "tools.x.writes.roots[0]", "lies beneath none of mounts", false},
		{"no mounts", `{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["make"]],"writes":{"roots":["workspace"]}}}}`,
			"tools.x.writes.roots[0]", "lies beneath none of mounts", false},
		// never and keep.
		{"bad never glob", execTool(`,"writes":{"roots":["workspace"],"never":["[x"]}`), "tools.x.writes.never[0]", "bad pattern", false},
		{"absolute never glob", execTool(`,"writes":{"roots":["workspace"],"never":["*.pem","/etc/x"]}`), "tools.x.writes.never[1]", "is absolute", false},
		{"bad keep glob", execTool(`,"writes":{"roots":["workspace"],"keep":["*.py","a/[x"]}`), "tools.x.writes.keep[1]", "bad pattern", false},
		{"absolute keep glob", execTool(`,"writes":{"roots":["workspace"],"keep":["/srv/workspace/**"]}`), "tools.x.writes.keep[0]", "keep globs match paths relative to base", false},
		{"empty keep glob", execTool(`,"writes":{"roots":["workspace"],"keep":[""]}`), "tools.x.writes.keep[0]", "empty", false},
		{"hard_links allow without any never", execTool(`,"hard_links":"allow","writes":{"roots":["workspace"]}`), "tools.x.hard_links", "applies only with never globs", false},
		// values.
		{"commit unknown", execTool(`,"writes":{"roots":["workspace"],"commit":"yes"}`), "tools.x.writes.commit", `is "yes"; use "approval"`, false},
		{"commit_on unknown", execTool(`,"writes":{"roots":["workspace"],"commit_on":"never"}`), "tools.x.writes.commit_on", `is "never"; use "success"`, false},
		{"keep with discard", execTool(`,"writes":{"roots":["workspace"],"commit":"discard","keep":["*.py"]}`), "tools.x.writes.keep", `with commit "discard" nothing is`, false},
		{"commit_on with discard", execTool(`,"writes":{"roots":["workspace"],"commit":"discard","commit_on":"always"}`), "tools.x.writes.commit_on", `with commit "discard" nothing is`, false},
		{"max_files negative", execTool(`,"writes":{"roots":["workspace"],"max_files":-1}`), "tools.x.writes.max_files", "is -1; use 1 to 1000000", false},
		{"max_files too many", execTool(`,"writes":{"roots":["workspace"],"max_files":2000000}`), "tools.x.writes.max_files", "is 2000000", false},
		{"max_bytes negative", execTool(`,"writes":{"roots":["workspace"],"max_bytes":-5}`), "tools.x.writes.max_bytes", "is -5; use 1 to", false},
		{"max_bytes too large", execTool(`,"writes":{"roots":["workspace"],"max_bytes":2199023255552}`), "tools.x.writes.max_bytes", "is 2199023255552", false},
		// cache.
		{"cache empty", execTool(`,"cache":[""]`), "tools.x.cache[0]", "is empty", false},
		{"cache NUL", execTool(`,"cache":["/a\u0000b"]`), "tools.x.cache[0]", "contains NUL", false},
		{"cache relative", execTool(`,"cache":["/root/.cache","root/.cache"]`), "tools.x.cache[1]", "is not absolute", false},
		{"cache unclean", execTool(`,"cache":["/root/.cache/"]`), "tools.x.cache[0]", `is not clean; write it "/root/.cache"`, false},
		{"cache dot-dot", execTool(`,"cache":["/root/../usr/x"]`), "tools.x.cache[0]", "is not clean", false},
		{"cache root", execTool(`,"cache":["/"]`), "tools.x.cache[0]", "is /", false},
		{"cache under /usr", execTool(`,"cache":["/usr/local/cache"]`), "tools.x.cache[0]", "lies under /usr, which sluice mounts itself", false},
		{"cache is /etc", execTool(`,"cache":["/etc"]`), "tools.x.cache[0]", "lies under /etc", false},
		{"cache under /proc", execTool(`,"cache":["/proc/self"]`), "tools.x.cache[0]", "lies under /proc", false},
		{"cache under /dev", execTool(`,"cache":["/dev/shm"]`), "tools.x.cache[0]", "lies under /dev", false},
		{"cache under /.sluice", execTool(`,"cache":["/.sluice/c"]`), "tools.x.cache[0]", "lies under /.sluice", false},
		{"cache under /bin", execTool(`,"cache":["/bin/x"]`), "tools.x.cache[0]", "lies under /bin", false},
		{"cache under /sbin", execTool(`,"cache":["/sbin/x"]`), "tools.x.cache[0]", "lies under /sbin", false},
		{"cache under /lib", execTool(`,"cache":["/lib/x"]`), "tools.x.cache[0]", "lies under /lib,", false},
		{"cache is /lib64", execTool(`,"cache":["/lib64"]`), "tools.x.cache[0]", "lies under /lib64", false},
		{"cache is /tmp", execTool(`,"cache":["/tmp"]`), "tools.x.cache[0]", "is /tmp, a tmpfs of each call's own", false},
		{"caches nest", execTool(`,"cache":["/root/.cache","/root/.cache/go-build"]`), "tools.x.cache[1]", `overlaps cache[0] "/root/.cache"`, false},
		{"caches nest the other way", execTool(`,"cache":["/root/.cache/go-build","/root"]`), "tools.x.cache[1]", `overlaps cache[0]`, false},
		{"cache twice", execTool(`,"cache":["/root/.cache","/root/.cache"]`), "tools.x.cache[1]", `overlaps cache[0]`, false},
		{"cache on a mount", execTool(`,"cache":["/srv/workspace/.cache"]`), "tools.x.cache[0]", `overlaps mounts[0] "workspace" (/srv/workspace in the container)`, false},
		{"cache is a mount", execTool(`,"cache":["/srv/workspace"]`), "tools.x.cache[0]", `overlaps mounts[0]`, false},
		{"cache above a mount", execTool(`,"cache":["/srv"]`), "tools.x.cache[0]", `overlaps mounts[0]`, false},
		{"cache a string", execTool(`,"cache":"/root/.cache"`), "tools.x.cache", `a list of container paths, e.g. ["/root/.cache/go-build"], not the string "/root/.cache"`, false},
		{"cache_mb negative", execTool(`,"cache":["/root/.cache"],"cache_mb":-1`), "tools.x.cache_mb", "is -1; use 1 to 1048576 MiB", false},
		{"cache_mb too large", execTool(`,"cache":["/root/.cache"],"cache_mb":2000000`), "tools.x.cache_mb", "is 2000000", false},
		{"cache_mb without cache", execTool(`,"cache_mb":64`), "tools.x.cache_mb", "applies only with cache", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			check := func(form string, err error) {
				t.Helper()
				var me *ManifestError
				if !errors.As(err, &me) {
					t.Fatalf("%s: %v, want a ManifestError at %s", form, err, c.key)
				}
				if me.Key != c.key || !strings.Contains(me.Msg, c.msg) {
					t.Errorf("%s: %v\nwant key %s and a message containing %q", form, err, c.key, c.msg)
				}
			}
			_, err := Parse(strings.NewReader(c.doc), "/srv")
			check("JSON", err)
			if c.jsonOnly {
				return
			}
			_, err = ParseTOML(bytes.NewReader(asTOML(t, c.doc)), "/srv")
			check("TOML", err)
		})
	}
}

const writesManifest = `{"schema_version":1,"tools":{
  "fmt":{"operation":"execute","commands":[["black",{"rest":{"glob":"*.py"}}]],"mounts":["workspace"],
    "never":[".env"],
    "writes":{"roots":["workspace/src","workspace/tests"],"never":["*.pem","private/**"],"commit":"auto","keep":["*.py","workspace/tests/data/**"]}},
  "test":{"operation":"execute","commands":[["make","test"]],"mounts":["workspace/src","."],
    "writes":{"roots":["workspace/src", "."],"commit":"discard","max_files":10,"max_bytes":1048576},
    "cache":["/root/.cache","/srvx"],"cache_mb":64,
    "egress":{"hosts":["pypi.org"]},"approval":"human"},
  "linky":{"operation":"execute","commands":[["make"]],"mounts":["workspace"],
    "hard_links":"allow","writes":{"roots":["workspace"],"never":["*.pem"],"commit_on":"always"}},
  "plain":{"operation":"execute","commands":[["make"]],"mounts":["workspace"],"writes":{"roots":["workspace"]}},
  "ro":{"operation":"execute","commands":[["make"]],"mounts":["workspace"]}}}`

// TestWritesLoads: writes and cache load, with their defaults, beside
// egress and approval; a TOML twin has one policy_version; WritesTool is
// the write tool a changeset is decided as, in no list of tools.
func TestWritesLoads(t *testing.T) {
	m := parse(t, writesManifest)
	tm, err := ParseTOML(bytes.NewReader(asTOML(t, writesManifest)), "/srv/agent")
	if err != nil {
		t.Fatal(err)
	}
	if tm.Version != m.Version {
		t.Errorf("TOML %s, JSON %s", tm.Version, m.Version)
	}
	fmtT, test, plain, ro := m.Tools["fmt"], m.Tools["test"], m.Tools["plain"], m.Tools["ro"]
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"fmt commit", fmtT.Writes.EffectiveCommit(), CommitAuto},
		{"fmt commit_on", fmtT.Writes.EffectiveCommitOn(), CommitOnSuccess},
		{"fmt max_files", fmtT.Writes.EffectiveMaxFiles(), int64(20000)},
		{"fmt max_bytes", fmtT.Writes.EffectiveMaxBytes(), int64(256 << 20)},
		{"fmt cache_mb", fmtT.EffectiveCacheMB(), int64(1024)},
		{"plain commit", plain.Writes.EffectiveCommit(), CommitApproval},
		{"linky commit_on", m.Tools["linky"].Writes.EffectiveCommitOn(), CommitOnAlways},
		{"test commit", test.Writes.EffectiveCommit(), CommitDiscard},
		{"test max_files", test.Writes.EffectiveMaxFiles(), int64(10)},
		{"test max_bytes", test.Writes.EffectiveMaxBytes(), int64(1 << 20)},
		{"test cache_mb", test.EffectiveCacheMB(), int64(64)},
		{"nil writes commit", ro.Writes.EffectiveCommit(), CommitApproval},
		{"nil writes max_files", ro.Writes.EffectiveMaxFiles(), int64(20000)},
		{"ro writes tool", ro.WritesTool() == nil, true},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	wt := fmtT.WritesTool()
	if wt == nil || wt != fmtT.WritesTool() {
		t.Fatal("WritesTool is not built once at Parse")
	}
	if wt.Operation != api.OpWrite || strings.Join(wt.Roots, ",") != "workspace/src,workspace/tests" ||
		strings.Join(wt.Never, ",") != "*.pem,private/**,.env" || !wt.RefusesHardLinks() || wt.EffectiveMaxBytes() != 256<<20 {
		t.Errorf("writes tool %+v", wt)
	}
	for _, tool := range m.Tools {
		if tool == wt {
			t.Fatal("the writes tool is in Manifest.Tools")
		}
	}
	if ms := MatchRoots(wt, "workspace/tests/t.py"); len(ms) != 1 || ms[0].Index != 1 || ms[0].Rel != "t.py" {
		t.Errorf("MatchRoots: %+v", ms)
	}
	if !NeverMatch(wt, "a/.env") || !NeverMatch(wt, "k.PEM") || NeverMatch(wt, "a.py") {
		t.Error("NeverMatch on the writes tool")
	}
	if !NeverMatchResolved(wt, 0, "private/x") {
		t.Error("NeverMatchResolved on the writes tool")
	}
	if m.Tools["linky"].WritesTool().RefusesHardLinks() {
		t.Error("hard_links allow not carried to the writes tool")
	}
	if plain.WritesTool().RefusesHardLinks() {
		t.Error("a writes tool without never refuses hard links")
	}
	// A tool built by hand gets its writes tool built on demand.
	hand := &Tool{Operation: api.OpExecute, Mounts: []string{"w"}, Writes: &ExecWrites{Roots: []string{"w"}, Keep: []string{"*.go"}}}
	if d := DecideChange(hand.WritesTool(), ChangeCreate, "w/a.go", []Resource{ok("a.go", KindAbsent)}); !d.Allowed() || d.Rule != "tools.?.writes.roots[0]" {
		t.Errorf("hand-built: %+v", d)
	}
	if !hand.Writes.Keeps("w/a.go") || hand.Writes.Keeps("w/a.c") {
		t.Error("hand-built keep")
	}
}

// TestDecideChange: one change of a changeset is decided as the file
// operation it is, by the tool's writes tool: every action against every
// kind and outcome the resolver reports, then roots, never (as requested
// and as resolved), hard links and lexical paths.
func TestDecideChange(t *testing.T) {
	m := parse(t, writesManifest)
	wt := m.Tools["fmt"].WritesTool()
	const root0 = "tools.fmt.writes.roots[0]"
	kinds := []api.Kind{KindAbsent, KindFile, KindDir, KindSymlink, KindFIFO, KindSocket, KindDevice, KindOther}
	const (
		allowed = api.ReasonAllowed
		precond = api.ReasonPreconditionFailed
		notFile = api.ReasonNotAFile
		notDir  = api.ReasonNotADirectory
		unsupp  = api.ReasonUnsupportedFileType
	)
	byKind := map[ChangeAction][]api.Reason{ // in the order of kinds
		ChangeCreate: {allowed, precond, notFile, unsupp, unsupp, unsupp, unsupp, unsupp},
		ChangeModify: {precond, allowed, notFile, unsupp, unsupp, unsupp, unsupp, unsupp},
		ChangeDelete: {precond, allowed, allowed, unsupp, unsupp, unsupp, unsupp, unsupp},
		ChangeMkdir:  {allowed, notDir, allowed, notDir, notDir, notDir, notDir, notDir},
	}
	outcomes := []struct {
		outcome string
		want    api.Reason
	}{
		{OutcomeNotFound, api.ReasonNotFound},
		{OutcomeEscapes, api.ReasonOutsideRoots},
		{OutcomeInvalid, api.ReasonInvalidPath},
		{OutcomeError, api.ReasonInternalError},
	}
	for action, wants := range byKind {
		for i, k := range kinds {
			res := ok("a", k)
			d := DecideChange(wt, action, "workspace/src/a", []Resource{res})
			if d.Reason != wants[i] || d.Rule != root0 || d.Allowed() != (wants[i] == allowed) {
				t.Errorf("%s of a %s: %s (%s), want %s (%s)", action, k, d.Reason, d.Rule, wants[i], root0)
			}
			if d.Resource == nil || d.Resource.Kind != k {
				t.Errorf("%s of a %s: decided on %+v", action, k, d.Resource)
			}
		}
		for _, o := range outcomes {
			d := DecideChange(wt, action, "workspace/src/a", []Resource{{Outcome: o.outcome}})
			if d.Reason != o.want || d.Rule != root0 {
				t.Errorf("%s, resolved %s: %s (%s), want %s", action, o.outcome, d.Reason, d.Rule, o.want)
			}
		}
	}

	linky := m.Tools["linky"].WritesTool()
	plain := m.Tools["plain"].WritesTool()
	for _, c := range []struct {
		name     string
		wt       *Tool
		action   ChangeAction
		path     string
		resolved []Resource
		want     api.Reason
		rule     string
	}{
		{"second root", wt, ChangeCreate, "workspace/tests/t.py", []Resource{ok("t.py", KindAbsent)}, allowed, "tools.fmt.writes.roots[1]"},
		{"root itself, mkdir", wt, ChangeMkdir, "workspace/src", []Resource{ok(".", KindDir)}, allowed, root0},
		{"root itself, delete (parent resolution refuses a dot name)", wt, ChangeDelete, "workspace/src", []Resource{{Outcome: OutcomeInvalid}}, api.ReasonInvalidPath, root0},
		// roots
		{"outside the writes roots, inside the mount", wt, ChangeModify, "workspace/README", nil, api.ReasonOutsideRoots, "tools.fmt.writes.roots"},
		{"outside everything", wt, ChangeCreate, "etc/passwd", nil, api.ReasonOutsideRoots, "tools.fmt.writes.roots"},
		{"a sibling sharing a prefix", wt, ChangeCreate, "workspace/srcx/a", nil, api.ReasonOutsideRoots, "tools.fmt.writes.roots"},
		{"dot-dot climbing out of the root", wt, ChangeCreate, "workspace/src/../README", nil, api.ReasonOutsideRoots, "tools.fmt.writes.roots"},
		{"dot-dot climbing out through a dir", wt, ChangeDelete, "workspace/src/a/../../../etc/x", nil, api.ReasonOutsideRoots, "tools.fmt.writes.roots"},
		{"dot-dot staying beneath, for the kernel", wt, ChangeCreate, "workspace/src/a/../b.py", []Resource{ok("b.py", KindAbsent)}, allowed, root0},
		// lexical
		{"absolute", wt, ChangeCreate, "/srv/agent/workspace/src/a", nil, api.ReasonInvalidPath, "tools.fmt.writes"},
		{"empty", wt, ChangeCreate, "", nil, api.ReasonInvalidPath, "tools.fmt.writes"},
		{"NUL", wt, ChangeCreate, "workspace/src/a\x00b", nil, api.ReasonInvalidPath, "tools.fmt.writes"},
		{"over-long name", wt, ChangeCreate, "workspace/src/" + strings.Repeat("n", 256), nil, api.ReasonInvalidPath, "tools.fmt.writes"},
		// never, as requested: writes.never and the tool's never
		{"writes.never name glob", wt, ChangeCreate, "workspace/src/k.pem", nil, api.ReasonNeverListed, "tools.fmt.writes.never[0]"},
		{"writes.never path glob", wt, ChangeMkdir, "workspace/tests/private/d", nil, api.ReasonNeverListed, "tools.fmt.writes.never[1]"},
		{"writes.never hides a directory's delete", wt, ChangeDelete, "workspace/src/private", nil, api.ReasonNeverListed, "tools.fmt.writes.never[1]"},
		{"the tool's never", wt, ChangeModify, "workspace/src/.env", nil, api.ReasonNeverListed, "tools.fmt.never[0]"},
		{"the tool's never, folded", wt, ChangeCreate, "workspace/src/sub/.ENV.", nil, api.ReasonNeverListed, "tools.fmt.never[0]"},
		{"writes.never, folded", wt, ChangeCreate, "workspace/src/ID.PEM", nil, api.ReasonNeverListed, "tools.fmt.writes.never[0]"},
		// never, as resolved (a symlinked directory on the way)
		{"resolved into writes.never", wt, ChangeCreate, "workspace/src/innocent/x", []Resource{ok("private/x", KindAbsent)}, api.ReasonNeverListed, "tools.fmt.writes.never[1]"},
		{"resolved onto the tool's never", wt, ChangeModify, "workspace/src/d/cfg", []Resource{ok("e/.env", KindFile)}, api.ReasonNeverListed, "tools.fmt.never[0]"},
		{"resolved onto a name glob", wt, ChangeModify, "workspace/tests/x", []Resource{ok("y/key.pem", KindFile)}, api.ReasonNeverListed, "tools.fmt.writes.never[0]"},
		// hard links
		{"hard-linked modify refused", wt, ChangeModify, "workspace/src/a.py", []Resource{linked(ok("a.py", KindFile))}, unsupp, "tools.fmt.hard_links"},
		{"hard-linked delete refused", wt, ChangeDelete, "workspace/src/a.py", []Resource{linked(ok("a.py", KindFile))}, unsupp, "tools.fmt.hard_links"},
		{"hard links allowed", linky, ChangeModify, "workspace/a.py", []Resource{linked(ok("a.py", KindFile))}, allowed, "tools.linky.writes.roots[0]"},
		{"no never: links allowed", plain, ChangeModify, "workspace/a.py", []Resource{linked(ok("a.py", KindFile))}, allowed, "tools.plain.writes.roots[0]"},
		// fail closed
		{"unresolved", wt, ChangeModify, "workspace/src/a.py", nil, api.ReasonInternalError, "tools.fmt.writes"},
		{"resolved for too few roots", wt, ChangeModify, "workspace/src/a.py", []Resource{}, api.ReasonInternalError, "tools.fmt.writes"},
		{"unknown action", wt, ChangeAction("chmod"), "workspace/src/a.py", []Resource{ok("a.py", KindFile)}, api.ReasonInternalError, "tools.fmt.writes"},
		{"zero action", wt, "", "workspace/src/a.py", []Resource{ok("a.py", KindFile)}, api.ReasonInternalError, "tools.fmt.writes"},
		{"no writes tool", nil, ChangeCreate, "workspace/src/a.py", []Resource{ok("a.py", KindAbsent)}, api.ReasonInternalError, ""},
	} {
		d := DecideChange(c.wt, c.action, c.path, c.resolved)
		if d.Reason != c.want || d.Rule != c.rule || d.Allowed() != (c.want == allowed) {
			t.Errorf("%s: %s (%s), want %s (%s)", c.name, d.Reason, d.Rule, c.want, c.rule)
		}
	}
	// The tool's approval is the call's, before the command runs: a
	// change is decided without it.
	if d := DecideChange(m.Tools["test"].WritesTool(), ChangeCreate, "out.txt", []Resource{ok("out.txt", KindAbsent)}); !d.Allowed() || d.Rule != "tools.test.writes.roots[1]" {
		t.Errorf("a change of a tool with approval: %+v", d)
	}
}

// TestKeeps: keep globs choose what is committed, matched against the
// path relative to base as never globs are matched.
func TestKeeps(t *testing.T) {
	m := parse(t, writesManifest)
	w := m.Tools["fmt"].Writes // keep ["*.py", "workspace/tests/data/**"]
	for _, c := range []struct {
		rel  string
		want bool
	}{
		{"workspace/src/a.py", true},
		{"workspace/src/deep/er/b.py", true},
		{"workspace/src/A.PY", true}, // folded, as never is
		{"workspace/src/a.py.", true},
		{"workspace/src/a.pyc", false},
		{"workspace/src/__pycache__/a.cpython-312.pyc", false},
		{"workspace/src/pkg.py/x.txt", true}, // a kept directory keeps what it holds, as never hides it
		{"workspace/tests/data/blob.bin", true},
		{"workspace/tests/data", true},
		{"workspace/tests/data2/blob.bin", false},
		{"workspace/src/tests/data/blob.bin", false}, // a path glob is from base
		{"workspace/build/out.o", false},
		{"", false},
	} {
		if got := w.Keeps(c.rel); got != c.want {
			t.Errorf("Keeps(%q) = %t, want %t", c.rel, got, c.want)
		}
	}
	for _, w := range []*ExecWrites{nil, m.Tools["plain"].Writes, {Roots: []string{"x"}, Keep: []string{}}} {
		if !w.Keeps("anything/at/all.o") {
			t.Errorf("%+v: without keep everything is kept", w)
		}
	}
}

// TestCacheUnderTmp: a cache may lie beneath /tmp (HOME is /tmp, so
// ~/.cache is /tmp/.cache), not be /tmp itself.
func TestCacheUnderTmp(t *testing.T) {
	doc := `{"schema_version":1,"tools":{"x":{"operation":"execute","commands":[["go","test"]],"cache":["/tmp/.cache/go-build"]}}}`
	if _, err := Parse(strings.NewReader(doc), "/base"); err != nil {
		t.Fatalf("a cache beneath /tmp refused: %v", err)
	}
}
