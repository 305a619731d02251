package authz

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

const changeManifest = `{"schema_version":1,"tools":{
  "edit":{"operation":"edit","roots":["ws"],"never":[".env","private/**"]},
  "mv":{"operation":"move","roots":["ws"],"never":[".env","private/**"]},
  "md":{"operation":"mkdir","roots":["ws"],"never":[".env","private/**"],"dir_mode":"0750"}}}`

// TestDecideChangingOps: edit, move and mkdir decide on what their
// targets resolved to; a move's two ends are each checked against the
// roots and never, as requested and as resolved.
func TestDecideChangingOps(t *testing.T) {
	m := parse(t, changeManifest)
	s := func(v string) *string { return &v }
	notFound := Resource{Outcome: OutcomeNotFound}
	for _, tc := range []struct {
		name string
		tool string
		args OpArgs
		res  [][]Resource
		want api.Reason
	}{
		{"edit file", "edit", &EditArgs{Path: s("ws/a")}, [][]Resource{{ok("a", KindFile)}}, api.ReasonAllowed},
		{"edit absent", "edit", &EditArgs{Path: s("ws/a")}, [][]Resource{{ok("a", KindAbsent)}}, api.ReasonNotFound},
		{"edit dir", "edit", &EditArgs{Path: s("ws/a")}, [][]Resource{{ok("a", KindDir)}}, api.ReasonNotAFile},
		{"edit symlink", "edit", &EditArgs{Path: s("ws/a")}, [][]Resource{{ok("a", KindSymlink)}}, api.ReasonUnsupportedFileType},
		{"edit never", "edit", &EditArgs{Path: s("ws/.env")}, nil, api.ReasonNeverListed},
		{"edit outside", "edit", &EditArgs{Path: s("etc/passwd")}, nil, api.ReasonOutsideRoots},
		{"edit dotdot", "edit", &EditArgs{Path: s("ws/../x")}, nil, api.ReasonOutsideRoots},
		{"edit absolute", "edit", &EditArgs{Path: s("/ws/a")}, nil, api.ReasonInvalidPath},

		{"move file", "mv", &MoveArgs{Path: s("ws/a"), To: s("ws/b")},
			[][]Resource{{ok("a", KindFile)}, {ok("b", KindAbsent)}}, api.ReasonAllowed},
		{"move dir", "mv", &MoveArgs{Path: s("ws/d"), To: s("ws/e")},
			[][]Resource{{ok("d", KindDir)}, {ok("e", KindAbsent)}}, api.ReasonAllowed},
		{"move symlink as itself", "mv", &MoveArgs{Path: s("ws/l"), To: s("ws/m")},
			[][]Resource{{ok("l", KindSymlink)}, {ok("m", KindAbsent)}}, api.ReasonAllowed},
		{"move absent source", "mv", &MoveArgs{Path: s("ws/a"), To: s("ws/b")},
			[][]Resource{{ok("a", KindAbsent)}, {ok("b", KindAbsent)}}, api.ReasonNotFound},
		{"move fifo", "mv", &MoveArgs{Path: s("ws/f"), To: s("ws/b")},
			[][]Resource{{ok("f", KindFIFO)}, {ok("b", KindAbsent)}}, api.ReasonUnsupportedFileType},
		{"move .env to innocent", "mv", &MoveArgs{Path: s("ws/.env"), To: s("ws/notes.txt")},
			[][]Resource{nil, {ok("notes.txt", KindAbsent)}}, api.ReasonNeverListed},
		{"move innocent to .env", "mv", &MoveArgs{Path: s("ws/a"), To: s("ws/.env")},
			[][]Resource{{ok("a", KindFile)}, nil}, api.ReasonNeverListed},
		{"move into private", "mv", &MoveArgs{Path: s("ws/a"), To: s("ws/private/a")},
			[][]Resource{{ok("a", KindFile)}, nil}, api.ReasonNeverListed},
		{"move out of private", "mv", &MoveArgs{Path: s("ws/private/k"), To: s("ws/k")},
			[][]Resource{nil, {ok("k", KindAbsent)}}, api.ReasonNeverListed},
		{"move resolved into never", "mv", &MoveArgs{Path: s("ws/a"), To: s("ws/link/b")},
			[][]Resource{{ok("a", KindFile)}, {ok("private/b", KindAbsent)}}, api.ReasonNeverListed},
		{"move source resolved never", "mv", &MoveArgs{Path: s("ws/link/k"), To: s("ws/b")},
			[][]Resource{{ok("private/k", KindFile)}, {ok("b", KindAbsent)}}, api.ReasonNeverListed},
		{"move to outside", "mv", &MoveArgs{Path: s("ws/a"), To: s("tmp/a")},
			[][]Resource{{ok("a", KindFile)}, nil}, api.ReasonOutsideRoots},
		{"move from outside", "mv", &MoveArgs{Path: s("../a"), To: s("ws/a")},
			[][]Resource{nil, {ok("a", KindAbsent)}}, api.ReasonOutsideRoots},
		{"move to escaping", "mv", &MoveArgs{Path: s("ws/a"), To: s("ws/link/a")},
			[][]Resource{{ok("a", KindFile)}, {{Outcome: OutcomeEscapes}}}, api.ReasonOutsideRoots},
		{"move to absolute", "mv", &MoveArgs{Path: s("ws/a"), To: s("/tmp/a")},
			[][]Resource{{ok("a", KindFile)}, nil}, api.ReasonInvalidPath},
		{"move to unresolved", "mv", &MoveArgs{Path: s("ws/a"), To: s("ws/b")},
			[][]Resource{{ok("a", KindFile)}}, api.ReasonInternalError},
		{"move hard link", "mv", &MoveArgs{Path: s("ws/a"), To: s("ws/b")},
			[][]Resource{{linked(ok("a", KindFile))}, {ok("b", KindAbsent)}}, api.ReasonUnsupportedFileType},

		{"mkdir", "md", &MkdirArgs{Path: s("ws/d")}, [][]Resource{{ok("d", KindAbsent)}}, api.ReasonAllowed},
		{"mkdir exists", "md", &MkdirArgs{Path: s("ws/d")}, [][]Resource{{ok("d", KindDir)}}, api.ReasonAllowed},
		{"mkdir over file", "md", &MkdirArgs{Path: s("ws/d")}, [][]Resource{{ok("d", KindFile)}}, api.ReasonNotADirectory},
		{"mkdir over symlink", "md", &MkdirArgs{Path: s("ws/d")}, [][]Resource{{ok("d", KindSymlink)}}, api.ReasonNotADirectory},
		{"mkdir missing parent", "md", &MkdirArgs{Path: s("ws/a/b")}, [][]Resource{{notFound}}, api.ReasonNotFound},
		{"mkdir parents", "md", &MkdirArgs{Path: s("ws/a/b"), Parents: true}, [][]Resource{{notFound}}, api.ReasonAllowed},
		{"mkdir parents never", "md", &MkdirArgs{Path: s("ws/private/a/b"), Parents: true}, nil, api.ReasonNeverListed},
		{"mkdir parents escapes", "md", &MkdirArgs{Path: s("ws/link/b"), Parents: true}, [][]Resource{{{Outcome: OutcomeEscapes}}}, api.ReasonOutsideRoots},
		{"mkdir parents outside", "md", &MkdirArgs{Path: s("x/a"), Parents: true}, nil, api.ReasonOutsideRoots},
	} {
		d := Decide(m, &Request{Principal: LocalPrincipal, Tool: tc.tool, Args: tc.args, Resolved: tc.res})
		if d.Reason != tc.want {
			t.Errorf("%s: got %s (%s), want %s", tc.name, d.Reason, d.Rule, tc.want)
		}
		if _, isMove := tc.args.(*MoveArgs); isMove && d.Allowed() && (len(d.Targets) != 2 || d.Targets[0] == nil || d.Targets[1] == nil || d.Resource != d.Targets[0]) {
			t.Errorf("%s: a move's decision must name both resolutions: %+v", tc.name, d)
		}
	}
	if got := m.Tools["md"].EffectiveDirMode(); got != 0o750 {
		t.Errorf("dir_mode 0750 read as %o", got)
	}
}

// TestMoveChangesHidden: a directory move may not carry a never-listed
// entry out from under a path glob, nor bring a visible one under it; an
// entry hidden at both ends stays hidden and may move.
func TestMoveChangesHidden(t *testing.T) {
	tool := parse(t, changeManifest).Tools["mv"]
	r := func(rel string) *Resource { return &Resource{Outcome: OutcomeOK, Rel: rel, Kind: KindDir} }
	for _, tc := range []struct {
		from, to, sub string
		want          bool
	}{
		{"a", "b", "x/y.go", false},
		{"a", "b", "x/.env", false},              // hidden at both
		{"a", "private", "x/y.go", true},         // a visible file would hide
		{"proj/private", "proj/pub", "k", false}, // "private/**" is anchored at the root
		{"private", "pub", "k", true},            // cannot happen (the source is denied), still refused
		{".", "b", "private/k", true},            // carried out from under private/**
		{"x", ".", "private/k", true},            // carried in under it
	} {
		if got := MoveChangesHidden(tool, r(tc.from), r(tc.to), tc.sub); got != tc.want {
			t.Errorf("%s -> %s carrying %s: %v, want %v", tc.from, tc.to, tc.sub, got, tc.want)
		}
	}
	if !MoveChangesHidden(tool, nil, r("b"), "x") {
		t.Error("a missing resolution must refuse")
	}
}

// TestChangingOpsRecordNoText: an edit's ledger record holds digests and
// lengths of its texts, never the texts; each of the three reads back
// from its record for replay.
func TestChangingOpsRecordNoText(t *testing.T) {
	m := parse(t, changeManifest)
	edit := m.Tools["edit"]
	a, err := opEdit.DecodeArgs(edit, []byte(`{"path":"ws/a","edits":[{"old_text":"SECRET-OLD","new_text":"SECRET-NEW"}],"if_match":"sha256:`+strings.Repeat("a", 64)+`"}`))
	if err != nil || a.Invalid != "" {
		t.Fatalf("decode: %v %q", err, a.Invalid)
	}
	if rec := string(a.Record); strings.Contains(rec, "SECRET") || !strings.Contains(rec, `"old_len":10`) || !strings.Contains(rec, "new_sha256") {
		t.Fatalf("edit recorded as %s", rec)
	}
	back, ok := opEdit.ArgsFromRecord(edit, a.Record)
	if ea := back.Value.(*EditArgs); !ok || derefOr(ea.Path) != "ws/a" || ea.EditCount != 1 || len(ea.Edits) != 0 {
		t.Fatalf("edit read back: %v %+v", ok, back.Value)
	}
	for _, tc := range []struct {
		op   *Op
		tool string
		raw  string
		bad  string
	}{
		{&opEdit, "edit", `{"path":"ws/a","edits":[]}`, "args.edits"},
		{&opEdit, "edit", `{"path":"ws/a","edits":[{"old_text":"","new_text":"x"}]}`, "args.edits[0].old_text"},
		{&opEdit, "edit", `{"path":"ws/a","edits":[{"old_text":"a","new_text":"b"}],"if_match":"absent"}`, "args.if_match"},
		{&opMove, "mv", `{"path":"ws/a"}`, "args.to"},
		{&opMove, "mv", `{"to":"ws/a"}`, "args.path"},
		{&opMkdir, "md", `{"parents":true}`, "args.path"},
	} {
		a, err := tc.op.DecodeArgs(m.Tools[tc.tool], []byte(tc.raw))
		if err != nil || !strings.HasPrefix(a.Invalid, tc.bad) {
			t.Errorf("%s: err %v, invalid %q, want %s", tc.raw, err, a.Invalid, tc.bad)
		}
	}
	mv, _ := opMove.DecodeArgs(m.Tools["mv"], []byte(`{"path":"ws/a","to":"ws/b"}`))
	if back, ok := opMove.ArgsFromRecord(m.Tools["mv"], mv.Record); !ok || back.Value.Subject() != "ws/a -> ws/b" {
		t.Fatalf("move read back: %v %+v", ok, back.Value)
	}
	if ch := opMove.Approval(m.Tools["mv"], &mv); len(ch.Summary) != 2 || ch.Summary[0].Value != "ws/a" || ch.Summary[1] != (api.ChangeField{Label: "to", Value: "ws/b"}) {
		t.Fatalf("a move's approval shows %+v, want its path and to", ch.Summary)
	}
	if ch := opEdit.Approval(edit, &a); ch.Kind != api.OpEdit || strings.Contains(fmt.Sprint(ch), "SECRET") {
		t.Fatalf("an edit's approval from its args: %+v", ch)
	}
	md, _ := opMkdir.DecodeArgs(m.Tools["md"], []byte(`{"path":"ws/a/b","parents":true}`))
	if back, ok := opMkdir.ArgsFromRecord(m.Tools["md"], md.Record); !ok || !back.Value.(*MkdirArgs).Parents {
		t.Fatalf("mkdir read back: %v %+v", ok, back.Value)
	}
}

// TestDirModeKey: dir_mode belongs to mkdir tools, and must let the
// owner search the directories it makes.
func TestDirModeKey(t *testing.T) {
	for _, tc := range []struct{ manifest, want string }{
		{`{"schema_version":1,"tools":{"w":{"operation":"write","roots":["ws"],"dir_mode":"0755"}}}`, "tools.w.dir_mode"},
		{`{"schema_version":1,"tools":{"m":{"operation":"mkdir","roots":["ws"],"dir_mode":"0644"}}}`, "tools.m.dir_mode"},
		{`{"schema_version":1,"tools":{"m":{"operation":"mkdir","roots":["ws"],"file_mode":"0644"}}}`, "tools.m.file_mode"},
		{`{"schema_version":1,"tools":{"m":{"operation":"mkdir","roots":["ws"],"dir_mode":"4755"}}}`, "tools.m.dir_mode"},
	} {
		if _, err := Parse(strings.NewReader(tc.manifest), "/b"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.manifest, err, tc.want)
		}
	}
}
