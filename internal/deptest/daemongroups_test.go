package deptest

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// daemonPkg is package daemon as the compiler sees it with -tags seccomp,
// type-checked from its source (non-test files only) against its
// imports' export data, with the groups daemon/doc.go declares.
type daemonPkg struct {
	fset   *token.FileSet
	groups []group          // in doc.go's order
	fileOf map[string]group // base name -> its group
	files  map[string]*ast.File
	info   *types.Info
	pkg    *types.Package
}

type group struct {
	name     string
	patterns []string
}

// groupLine is one line of doc.go's "# Groups" list: a tab, a name, a
// colon, file patterns (path.Match) separated by spaces.
var groupLine = regexp.MustCompile(`^\t([a-z]+):\s+(\S.*)$`)

// parseGroups reads the groups from the package comment in doc.go: the
// tab-indented "name: patterns" lines after the "# Groups" heading.
func parseGroups(doc string) ([]group, error) {
	_, after, ok := strings.Cut(doc, "# Groups\n")
	if !ok {
		return nil, fmt.Errorf("no \"# Groups\" heading in the package comment")
	}
	var gs []group
	for _, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(line, "# ") {
			break
		}
		m := groupLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		gs = append(gs, group{name: m[1], patterns: strings.Fields(m[2])})
	}
	if len(gs) == 0 {
		return nil, fmt.Errorf("the \"# Groups\" list is empty")
	}
	return gs, nil
}

// groupOf returns the one group a file's base name matches. A pattern
// without a wildcard beats one with (so op_*.go may sit beside a named
// file that also starts op_), and a file no group claims is an error: a
// new file is placed on purpose.
func groupOf(gs []group, name string) (group, error) {
	var exact, wild []group
	for _, g := range gs {
		for _, p := range g.patterns {
			ok, err := path.Match(p, name)
			if err != nil {
				return group{}, fmt.Errorf("group %s: bad pattern %q", g.name, p)
			}
			if !ok {
				continue
			}
			if strings.ContainsAny(p, "*?[") {
				wild = append(wild, g)
			} else {
				exact = append(exact, g)
			}
		}
	}
	switch {
	case len(exact) == 1:
		return exact[0], nil
	case len(exact) > 1 || len(wild) > 1:
		return group{}, fmt.Errorf("%s is in more than one group", name)
	case len(wild) == 1:
		return wild[0], nil
	}
	return group{}, fmt.Errorf("%s is in no group of daemon/doc.go's \"# Groups\": add it to the group whose concern it is", name)
}

// loadDaemon parses and type-checks package daemon; extra files (name ->
// source, each with a group) are checked with it, for the rules' own test.
func loadDaemon(t *testing.T, extra map[string]string, extraGroup map[string]string) *daemonPkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-tags", "seccomp", "-json", "../../daemon").Output()
	if err != nil {
		t.Fatalf("go list daemon: %v", err)
	}
	var lp struct {
		Dir      string
		GoFiles  []string
		CgoFiles []string
	}
	if err := json.Unmarshal(out, &lp); err != nil {
		t.Fatal(err)
	}
	if len(lp.CgoFiles) > 0 {
		t.Fatalf("daemon has cgo files %v: this test type-checks pure Go only", lp.CgoFiles)
	}
	// The export data of daemon's dependencies, built as for -tags
	// seccomp (cgo included): go/types reads them, so nothing beyond
	// daemon itself is type-checked here.
	out, err = exec.Command("go", "list", "-tags", "seccomp", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", "../../daemon").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if p, f, ok := strings.Cut(line, "\t"); ok && f != "" {
			exports[p] = f
		}
	}

	d := &daemonPkg{fset: token.NewFileSet(), fileOf: map[string]group{}, files: map[string]*ast.File{}}
	var list []*ast.File
	for _, name := range lp.GoFiles {
		f, err := parser.ParseFile(d.fset, filepath.Join(lp.Dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		d.files[name] = f
		list = append(list, f)
		if name == "doc.go" {
			if f.Doc == nil {
				t.Fatal("daemon/doc.go has no package comment")
			}
			if d.groups, err = parseGroups(f.Doc.Text()); err != nil {
				t.Fatalf("daemon/doc.go: %v", err)
			}
		}
	}
	if d.groups == nil {
		t.Fatal("daemon has no doc.go")
	}
	for _, name := range lp.GoFiles {
		g, err := groupOf(d.groups, name)
		if err != nil {
			t.Error(err)
			continue
		}
		d.fileOf[name] = g
	}
	for name, src := range extra {
		f, err := parser.ParseFile(d.fset, filepath.Join(lp.Dir, name), src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		d.files[name] = f
		list = append(list, f)
		d.fileOf[name] = group{name: extraGroup[name]}
	}

	d.info = &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(d.fset, "gc", func(p string) (io.ReadCloser, error) {
		f, ok := exports[p]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", p)
		}
		return os.Open(f)
	})}
	d.pkg, err = conf.Check("github.com/sluicehq/sluice/daemon", d.fset, list, d.info)
	if err != nil {
		t.Fatalf("type-checking daemon: %v", err)
	}
	return d
}

// use is one file's use of a name (a top-level identifier or a method)
// another file of daemon declares.
type use struct {
	from, to string // base names of the using and the declaring file
	name     string // the name, "recv.method" for a method, "Type.field" for a field
	field    bool
}

// fieldNames maps each struct field declared in a named type of daemon to
// "Type.field", by the position of its name.
func (d *daemonPkg) fieldNames() map[token.Pos]string {
	m := map[token.Pos]string{}
	for _, f := range d.files {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			if st, ok := ts.Type.(*ast.StructType); ok {
				for _, fl := range st.Fields.List {
					for _, id := range fl.Names {
						m[id.Pos()] = ts.Name.Name + "." + id.Name
					}
				}
			}
			return true
		})
	}
	return m
}

// uses returns every distinct (file, name) use across files, sorted.
func (d *daemonPkg) uses() []use {
	seen := map[use]bool{}
	fields := d.fieldNames()
	for id, obj := range d.info.Uses {
		if obj.Pkg() != d.pkg {
			continue
		}
		name, field := obj.Name(), false
		switch o := obj.(type) {
		case *types.Var:
			if o.IsField() {
				field = true
				obj = o.Origin()
				if n, ok := fields[obj.Pos()]; ok {
					name = n
				}
			} else if o.Parent() != d.pkg.Scope() {
				continue // locals
			}
		case *types.Func:
			o = o.Origin()
			obj = o
			if recv := o.Signature().Recv(); recv != nil {
				name = recvName(recv.Type()) + "." + name
			} else if o.Parent() != d.pkg.Scope() {
				continue
			}
		default:
			if obj.Parent() != d.pkg.Scope() {
				continue // locals, labels
			}
		}
		from := filepath.Base(d.fset.Position(id.Pos()).Filename)
		to := filepath.Base(d.fset.Position(obj.Pos()).Filename)
		if from == to {
			continue
		}
		seen[use{from, to, name, field}] = true
	}
	var us []use
	for u := range seen {
		us = append(us, u)
	}
	slices.SortFunc(us, func(a, b use) int {
		return strings.Compare(a.from+" "+a.to+" "+a.name, b.from+" "+b.to+" "+b.name)
	})
	return us
}

func recvName(t types.Type) string {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	switch n := t.(type) {
	case *types.Named:
		return n.Obj().Name()
	case *types.Alias:
		return n.Obj().Name()
	}
	return t.String()
}

// opUnit reports whether a file of daemon is one operation's own unit
// (daemon/op_NAME.go); new ones are covered as they are added.
func opUnit(name string) bool {
	ok, _ := path.Match("op_*.go", name)
	return ok
}

// fence: group from may use, of the groups in to, only the names in only
// (name, or "recv.method", -> why it is offered).
type fence struct {
	from string
	to   []string
	why  string
	only map[string]string
	// openFields: the fields of to's types are open to from (the call,
	// its outcome and the Daemon are what the pipeline hands an executor).
	openFields bool
}

// pipelineOffers is what the pipeline (and the Daemon, in core) offers an
// operation's effectful half: the call and what it resolved, its
// decision, its reason for ending, the task's generation, the container
// slots, the ledger. An executor needs nothing else of the pipeline; a new
// need is added here, with why, not reached for.
var pipelineOffers = map[string]string{
	"Daemon":                   "the daemon's locks, slots, log and config (fields)",
	"call":                     "the call an executor runs",
	"outcome":                  "what an executor returns",
	"heldTarget":               "one target as resolve held it (its fd, its parents)",
	"call.parent":              "a write target's held parent",
	"call.handle":              "a read target's held fd",
	"call.decidedBy":           "the rule that allowed the call, for its result",
	"call.reasonOf":            "an error's reason (errclass), the call's cause first",
	"call.endReason":           "why the call's context ended",
	"call.waitSlot":            "a container slot (admission)",
	"call.principalRecord":     "the ledger record's principal fields",
	"call.tokenRef":            "the ledger record's token (docs/tokens.md)",
	"registry.current":         "the task's generation, checked at commit",
	"errCallCancelled":         "the typed error a cancelled commit returns",
	"errHardLinked":            "the typed error for a hard-linked file",
	"errMisplaced":             "the typed error for a file moved out of its root",
	"links":                    "the hard-link check resolve uses",
	"sha256Of":                 "the one spelling of a digest the wire and the ledger carry",
	"relBeneath":               "how a resolved fd is named in a resource, as the kernel names it (execute's path arguments resolve as file tools' paths do)",
	"meteredLedger.Append":     "the ledger (execute's connection records)",
	"meteredLedger.Sync":       "the ledger",
	"meteredLedger.AppendSync": "the ledger",
	"call.releaseHeld":         "a command's dead box let go before its changeset commits or parks",
	"cacheSet.get":             "a principal's cache for a box (exec_cache.go)",
	"cacheKey":                 "as cacheSet.get",
	"outcomeOf":                "the resolution outcome an error stands for (a changeset's changes resolve as write targets do)",
}

// showKit is what approvals offer an operation's show hook (opSpec.show):
// the parked call, its body as parked, the file as it is now.
var showKit = map[string]string{
	"parked":                     "the parked call a show hook is given",
	"Daemon.parkedContent":       "the parked body (spilled or in memory)",
	"Daemon.currentFile":         "the target as it is now, read beneath its root",
	"isText":                     "whether content can be shown as a diff",
	"maxDiffInput":               "the most of a file an approval diffs",
	"parked.shown":               "what the hook read of the file, for the approver's decision to bind to",
	"parkedView.path":            "the target's path as the call named it",
	"call.awaitApprovalAfterRun": "the one door a call that has run (a changeset) is parked through",
}

// fences are the rules between daemon's groups (daemon/doc.go, "# Groups").
var fences = []fence{
	{from: "operations", to: []string{"pipeline", "core"}, only: pipelineOffers, openFields: true,
		why: "an operation's effectful half uses only what the pipeline offers it (pipelineOffers)"},
	{from: "operations", to: []string{"transport"},
		why: "an operation knows no HTTP: it returns a typed result (opResult) the pipeline presents"},
	{from: "operations", to: []string{"recovery"},
		why: "recovery reads what an operation publishes (opSpec.tempName); no operation calls it"},
	{from: "operations", to: []string{"approvals"}, only: showKit,
		why: "an operation adds to an approval only through its show hook and the kit approvals offer it (showKit)"},
	{from: "operations", to: []string{"policy"}, only: map[string]string{
		"policy":        "the loaded manifest a load or show hook is given",
		"policy.m":      "the manifest",
		"policy.base":   "the manifest's base fd, beneath which execute resolves its mounts",
		"policy.exec":   "the execute tools execute's load hook readies",
		"policy.creds":  "the credential values fetch's and post's load hook reads",
		"policy.runner": "the sandbox runner execute's containers run in",
		"policy.roots":  "the root fds a tool's roots were opened as, beneath which mkdir makes each missing parent",
	},
		why: "loading the manifest is policy.go's; an operation readies its tools in its load hook"},
	{from: "operations", to: []string{"metrics"}, only: map[string]string{"metrics.poolGet": "execute counts its warm and cold containers"},
		why: "the pipeline meters calls; an operation does not"},
	{from: "pipeline", to: []string{"approvals"}, only: map[string]string{"call.awaitApproval": "the one door a call is parked through"},
		why: "the pipeline parks a call through awaitApproval alone; what an approver sees and decides is approvals'"},
	{from: "approvals", to: []string{"operations"},
		why: "approvals render any operation through opSpec.show and authz.Op.Approval, never its code"},
	{from: "transport", to: []string{"operations"},
		why: "transport (the HTTP handlers, events, systemd) passes calls to the pipeline and knows no operation"},
	{from: "recovery", to: []string{"operations"},
		why: "recovery finds an operation's leftovers through the table (opSpec.tempName) alone"},
	{from: "recovery", to: []string{"table"}, only: map[string]string{
		"operations":      "the table",
		"opSpec.tempName": "the temp name an operation's commit leaves",
	},
		why: "recovery reads the table, nothing else of it"},
}

// unitOutsiders are the names of op_NAME.go files that files outside the
// operations group and the table may use ("file name"; anything else of an
// operation is its own), with why they are not yet its own.
var unitOutsiders = map[string]string{
	"policy.go execTool":         "a policy owns the execute tools it loaded, starts their pools and closes them with itself",
	"policy.go execTool.start":   "as execTool",
	"policy.go execTool.close":   "as execTool",
	"policy.go execTool.pool":    "as execTool; readiness and the metrics see the pools through policy.pools",
	"policy.go execTool.cache":   "a tool with caches keeps no pool (its boxes bind the caller's caches)",
	"policy.go execTool.writes":  "its writes roots are checked against the policy's files as write roots are",
	"policy.go writeSet.roots":   "as execTool.writes",
	"policy.go writeSet.wt":      "as execTool.writes: nested writes roots with never are spelled as the kernel names them",
	"resolve.go call.resolveNet": "a URL target resolves in op_net.go (the net target moves it into resolve)",
}

// violations returns every use that breaks a rule, as a message.
func (d *daemonPkg) violations(us []use) []string {
	// The executors: every name of an op_NAME.go file the table (ops.go)
	// uses. Only the table names them.
	executors := map[string]string{}
	for _, u := range us {
		if d.fileOf[u.from].name == "table" && opUnit(u.to) {
			executors[u.name] = u.to
		}
	}
	var msgs []string
	for _, u := range us {
		fg, tg := d.fileOf[u.from].name, d.fileOf[u.to].name
		at := fmt.Sprintf("%s (%s) uses %s of %s (%s)", u.from, fg, u.name, u.to, tg)
		if decl, ok := executors[u.name]; ok && decl == u.to && fg != "table" {
			msgs = append(msgs, at+": only the table (ops.go) names an operation's executor or hooks")
		}
		if opUnit(u.to) && fg != "operations" && fg != "table" {
			if _, ok := unitOutsiders[u.from+" "+u.name]; !ok {
				msgs = append(msgs, at+": an operation's unit is its own; the rest of daemon reaches it through the table (opSpec)")
			}
		}
		if fg == tg {
			continue
		}
		for _, f := range fences {
			if f.from != fg || !slices.Contains(f.to, tg) {
				continue
			}
			if _, ok := f.only[u.name]; !ok && !(u.field && f.openFields) {
				msgs = append(msgs, at+": "+f.why)
			}
		}
	}
	return msgs
}

// TestDaemonGroups: package daemon's files keep to their groups' fences.
func TestDaemonGroups(t *testing.T) {
	d := loadDaemon(t, nil, nil)
	us := d.uses()
	cross := 0
	for _, u := range us {
		if d.fileOf[u.from].name != d.fileOf[u.to].name {
			cross++
		}
	}
	t.Logf("%d uses across files, %d across groups", len(us), cross)
	for _, m := range d.violations(us) {
		t.Error(m)
	}
	// Every group named in a rule exists, and every offered name exists:
	// a rule on a renamed group or name would hold vacuously.
	names := map[string]bool{}
	for _, u := range us {
		names[u.name] = true
		names[u.from+" "+u.name] = true
	}
	groups := map[string]bool{}
	for _, g := range d.groups {
		groups[g.name] = true
	}
	for _, f := range fences {
		for _, g := range append([]string{f.from}, f.to...) {
			if !groups[g] {
				t.Errorf("a fence names group %q, which daemon/doc.go does not declare", g)
			}
		}
		for n := range f.only {
			if !names[n] {
				t.Errorf("fence %s -> %v offers %s, which no file uses: drop it", f.from, f.to, n)
			}
		}
	}
	for n := range unitOutsiders {
		if !names[n] {
			t.Errorf("unitOutsiders lists %s, which no file uses: drop it", n)
		}
	}
}

// TestDaemonGroupsRefuse: each rule refuses a use planted to break it.
func TestDaemonGroupsRefuse(t *testing.T) {
	planted := map[string]struct{ group, src, want string }{
		"zz_approvals.go": {"approvals", "func (c *call) zzApprove() *outcome { return execWrite(c, nil) }",
			"uses execWrite of op_write.go (operations): approvals render any operation"},
		"zz_transport.go": {"transport", "func (c *call) zzHandle() { _ = c.decidedNet }",
			"zz_transport.go (transport) uses call.decidedNet of op_net.go (operations): transport"},
		"zz_transport_field.go": {"transport", "func zzPools(p *policy) { for _, et := range p.exec { _ = et.pool } }",
			"zz_transport_field.go (transport) uses execTool.pool of op_execute.go (operations): transport"},
		"zz_recovery.go": {"recovery", "var _ = writeTempName",
			"only the table (ops.go) names"},
		"zz_pipeline.go": {"pipeline", "var _ readResult",
			"zz_pipeline.go (pipeline) uses readResult of op_read.go (operations): an operation's unit is its own"},
		"zz_ops_http.go": {"operations", "var _ = writeError",
			"zz_ops_http.go (operations) uses writeError of http.go (transport): an operation knows no HTTP"},
		"zz_ops_approvals.go": {"operations", "func (d *Daemon) zzOp() { _ = d.handleApprovals }",
			"uses Daemon.handleApprovals of approvals.go (approvals): an operation adds to an approval only"},
		"zz_ops_recovery.go": {"operations", "func (d *Daemon) zzRecover() { _ = d.recoverWrites }",
			"uses Daemon.recoverWrites of recover.go (recovery)"},
		"zz_pipeline_approvals.go": {"pipeline", "func (d *Daemon) zzPark() { _ = d.approvalChange }",
			"uses Daemon.approvalChange of spill_change.go (approvals): the pipeline parks a call through awaitApproval alone"},
		"zz_ops_pipeline.go": {"operations", "func (c *call) zzResolve() { _ = c.resolve }",
			"uses call.resolve of resolve.go (pipeline): an operation's effectful half uses only what the pipeline offers"},
	}
	extra, groups := map[string]string{}, map[string]string{}
	for name, p := range planted {
		extra[name] = "package daemon\n\n" + p.src + "\n"
		groups[name] = p.group
	}
	d := loadDaemon(t, extra, groups)
	msgs := d.violations(d.uses())
	for name, p := range planted {
		found := false
		for _, m := range msgs {
			found = found || (strings.HasPrefix(m, name+" ") && strings.Contains(m, p.want))
		}
		if !found {
			t.Errorf("%s (%s: %s) was not refused with %q", name, p.group, p.src, p.want)
		}
	}
}
