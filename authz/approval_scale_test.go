package authz

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// scaleManifest: two approvers (alice, bob) who call nothing, an agent
// that calls everything; tools whose approval_when narrows what parks.
const scaleManifest = `{"schema_version":1,
  "principals":{"agent":{"uids":[1000],"tools":["*"]},
                "alice":{"uids":[2001],"approver":true,"tools":[]},
                "bob":{"uids":[2002],"approver":true,"tools":[]}},
  "tools":{
   "two":{"operation":"read","roots":["ws"],"approval":"human","approvers":2},
   "edit":{"operation":"write","roots":["ws","ws/src"],"approval":"human",
           "approval_when":{"paths":["deploy/**","*.sql"]}},
   "mv":{"operation":"move","roots":["ws"],"approval":"human","approval_when":{"paths":["prod/**"]}},
   "run":{"operation":"execute","commands":[["git",{"rest":{"any":true}}]],"approval":"human",
          "approval_when":{"commands":[["git","push",{"rest":{"any":true}}],["git",{"regex":"reset|clean"},{"rest":{"any":true}}]]}},
   "only":{"operation":"execute","commands":[["make","deploy"]],"approval":"human",
          "approval_when":{"commands":[["make","deploy"]]}},
   "notify":{"operation":"post","webhooks":["https://hooks.example/**"],"approval":"human",
          "approval_when":{"urls":["https://hooks.example/prod/*"]}}}}`

// TestApprovalWhen: only calls that match approval_when park; the others
// are allowed by their own rule. Paths match as never globs do: as
// requested, as the kernel resolved them (a symlink into deploy/), from
// every root that contains them, and by name.
func TestApprovalWhen(t *testing.T) {
	m := parse(t, scaleManifest)
	s := func(v string) *string { return &v }
	post := func(url string) OpArgs {
		a, err := opPost.DecodeArgs(m.Tools["notify"], []byte(`{"url":"`+url+`","body":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		return a.Value
	}
	netOK := [][]Resource{{{Outcome: OutcomeOK, Addrs: []string{"140.82.112.7"}}}}
	for _, c := range []struct {
		name string
		req  Request
		want api.Reason
	}{
		{"path outside approval_when", Request{Tool: "edit", Args: &WriteArgs{Path: s("ws/a.txt")},
			Resolved: [][]Resource{{ok("a.txt", KindAbsent)}}}, api.ReasonAllowed},
		{"path under deploy", Request{Tool: "edit", Args: &WriteArgs{Path: s("ws/deploy/k8s.yaml")},
			Resolved: [][]Resource{{ok("deploy/k8s.yaml", KindFile)}}}, api.ReasonApprovalRequired},
		{"by name anywhere", Request{Tool: "edit", Args: &WriteArgs{Path: s("ws/db/m/001.SQL")},
			Resolved: [][]Resource{{ok("db/m/001.SQL", KindFile)}}}, api.ReasonApprovalRequired},
		{"resolved into deploy (symlink)", Request{Tool: "edit", Args: &WriteArgs{Path: s("ws/innocent/x")},
			Resolved: [][]Resource{{ok("deploy/x", KindFile)}}}, api.ReasonApprovalRequired},
		{"deploy from the inner root", Request{Tool: "edit", Args: &WriteArgs{Path: s("ws/src/deploy/x")},
			Resolved: [][]Resource{{ok("src/deploy/x", KindFile), ok("deploy/x", KindFile)}}}, api.ReasonApprovalRequired},
		{"resolved beneath the outer root into the inner root's deploy", Request{Tool: "edit", Args: &WriteArgs{Path: s("ws/link/x")},
			Resolved: [][]Resource{{ok("src/deploy/x", KindFile)}}}, api.ReasonApprovalRequired},
		{"move from prod", Request{Tool: "mv", Args: &MoveArgs{Path: s("ws/prod/a"), To: s("ws/b")},
			Resolved: [][]Resource{{ok("prod/a", KindFile)}, {ok("b", KindAbsent)}}}, api.ReasonApprovalRequired},
		{"move into prod", Request{Tool: "mv", Args: &MoveArgs{Path: s("ws/a"), To: s("ws/prod/a")},
			Resolved: [][]Resource{{ok("a", KindFile)}, {ok("prod/a", KindAbsent)}}}, api.ReasonApprovalRequired},
		{"move elsewhere", Request{Tool: "mv", Args: &MoveArgs{Path: s("ws/a"), To: s("ws/b")},
			Resolved: [][]Resource{{ok("a", KindFile)}, {ok("b", KindAbsent)}}}, api.ReasonAllowed},
		{"git status", Request{Tool: "run", Args: &ExecArgs{Argv: []string{"git", "status"}}}, api.ReasonAllowed},
		{"git push", Request{Tool: "run", Args: &ExecArgs{Argv: []string{"git", "push", "origin", "main"}}}, api.ReasonApprovalRequired},
		{"git reset", Request{Tool: "run", Args: &ExecArgs{Argv: []string{"git", "reset", "--hard"}}}, api.ReasonApprovalRequired},
		{"the only command, argv omitted", Request{Tool: "only", Args: &ExecArgs{}}, api.ReasonApprovalRequired},
		{"post to staging", Request{Tool: "notify", Args: post("https://hooks.example/staging/x"), Resolved: netOK}, api.ReasonAllowed},
		{"post to prod", Request{Tool: "notify", Args: post("https://hooks.example/prod/x"), Resolved: netOK}, api.ReasonApprovalRequired},
		{"approved call", Request{Tool: "edit", Args: &WriteArgs{Path: s("ws/deploy/x")}, Approved: true,
			Resolved: [][]Resource{{ok("deploy/x", KindFile)}}}, api.ReasonAllowed},
	} {
		c.req.Principal = "agent"
		d := Decide(m, &c.req)
		if d.Reason != c.want {
			t.Errorf("%s: %s (%s), want %s", c.name, d.Reason, d.Rule, c.want)
		}
		if c.want == api.ReasonAllowed && strings.HasSuffix(d.Rule, ".approval") {
			t.Errorf("%s: allowed under rule %s: want the rule that matched", c.name, d.Rule)
		}
	}
}

// TestApprovalScaleLoadErrors: approvers and approval_when are checked
// when the manifest loads, each error naming its key.
func TestApprovalScaleLoadErrors(t *testing.T) {
	const head = `{"schema_version":1,"principals":{"agent":{"uids":[1000],"tools":["*"]},"alice":{"uids":[2001],"approver":true,"tools":[]},"bob":{"uids":[2002],"approver":true,"tools":%s}},"tools":{"t":%s}}`
	for _, c := range []struct{ bobTools, tool, want string }{
		{`[]`, `{"operation":"read","roots":["ws"],"approval":"human","approvers":3}`,
			"tools.t.approvers: is 3, but the manifest has 2 approver principals (alice, bob)"},
		{`["t"]`, `{"operation":"read","roots":["ws"],"approval":"human","approvers":2}`,
			"tools.t.approvers: is 2, but principal bob may call t"},
		{`[]`, `{"operation":"read","roots":["ws"],"approvers":2}`,
			"tools.t.approvers: applies only with"},
		{`[]`, `{"operation":"read","roots":["ws"],"approval":"human","approvers":0}`, ""},
		{`[]`, `{"operation":"read","roots":["ws"],"approval":"human","approvers":17}`, "tools.t.approvers: is 17"},
		{`[]`, `{"operation":"read","roots":["ws"],"approval_when":{"paths":["x"]}}`,
			"tools.t.approval_when: applies only with \"approval\": \"human\""},
		{`[]`, `{"operation":"read","roots":["ws"],"approval":"human","approval_when":{"urls":["https://h/x"]}}`,
			"tools.t.approval_when.urls: does not apply to read tools; use approval_when.paths"},
		{`[]`, `{"operation":"read","roots":["ws"],"approval":"human","approval_when":{}}`,
			"tools.t.approval_when.paths: missing or empty"},
		{`[]`, `{"operation":"read","roots":["ws"],"approval":"human","approval_when":{"paths":["/abs"]}}`,
			"tools.t.approval_when.paths[0]: \"/abs\": is absolute"},
		{`[]`, `{"operation":"fetch","hosts":["h.example"],"approval":"human","approval_when":{"urls":["https://h.example/x"]}}`,
			"tools.t.approval_when: does not apply to fetch tools"},
		{`[]`, `{"operation":"execute","commands":[["ls"]],"approval":"human","approval_when":{"commands":[["ls",{"path":["ws"]}]]}}`,
			"tools.t.approval_when.commands[0][1]: a path element cannot say when a call waits"},
		{`[]`, `{"operation":"execute","commands":[["ls"]],"approval":"human","approval_when":{"commands":[["ls",{"regex":"("}]]}}`,
			"tools.t.approval_when.commands[0][1]: regex \"(\" does not compile"},
		{`[]`, `{"operation":"post","webhooks":["https://h.example/*"],"approval":"human","approval_when":{"urls":["http://h.example/*"]}}`,
			"tools.t.approval_when: urls[0]"},
		{`[]`, `{"operation":"post","webhooks":["https://h.example/*"],"approval":"human","approval_when":{"urls":["https://h.example/p/*"]}}`, ""},
	} {
		_, err := Parse(strings.NewReader(strings.Replace(strings.Replace(head, "%s", c.bobTools, 1), "%s", c.tool, 1)), "/srv")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.tool, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s:\n got %v\nwant %q", c.tool, err, c.want)
		}
	}
	// Without principals only uid 0 approves: two cannot be had.
	_, err := Parse(strings.NewReader(`{"schema_version":1,"tools":{"t":{"operation":"read","roots":["ws"],"approval":"human","approvers":2}}}`), "/srv")
	if err == nil || !strings.Contains(err.Error(), "declares no principals") {
		t.Errorf("approvers 2 without principals: %v", err)
	}
}

// TestSameApprover: an approver is the call's own principal by name;
// without declared principals (everyone is "local") by uid.
func TestSameApprover(t *testing.T) {
	m := parse(t, scaleManifest)
	if !m.SameApprover("alice", 2001, "alice", 9999) || m.SameApprover("alice", 2001, "agent", 1000) {
		t.Error("declared principals: same by name")
	}
	local := parse(t, `{"schema_version":1,"tools":{"t":{"operation":"read","roots":["ws"],"approval":"human"}}}`)
	if !local.SameApprover("local", 0, "local", 0) || local.SameApprover("local", 0, "local", 1000) {
		t.Error("no principals: same by uid")
	}
	if got := m.SelfApprovalUnreachable(); len(got) != 0 {
		t.Errorf("the approvers call nothing: %v", got)
	}
	sole := parse(t, `{"schema_version":1,"principals":{"agent":{"uids":[1000],"tools":["*"]},"bob":{"uids":[0],"approver":true,"tools":["t"]}},
	  "tools":{"t":{"operation":"read","roots":["ws"],"approval":"human"},"u":{"operation":"read","roots":["ws"]}}}`)
	if got := sole.SelfApprovalUnreachable(); len(got) != 1 || len(got["t"]) != 1 || got["t"][0] != "bob" {
		t.Errorf("bob, the only approver, calls t: %v", got)
	}
}

// TestApprovalScaleTOML: approvers and approval_when read the same from
// TOML, patterns included.
func TestApprovalScaleTOML(t *testing.T) {
	m, err := ParseTOML(strings.NewReader(`schema_version = 1
[principals.agent]
uids = [1000]
tools = ["*"]
[principals.alice]
uids = [2001]
approver = true
tools = []
[principals.bob]
uids = [2002]
approver = true
tools = []
[tools.run]
operation = "execute"
commands = [["git", {rest = {any = true}}]]
approval = "human"
approvers = 2
[tools.run.approval_when]
commands = [["git", "push", {rest = {any = true}}]]
`), "/srv")
	if err != nil {
		t.Fatal(err)
	}
	for argv, want := range map[string]api.Reason{"git status": api.ReasonAllowed, "git push origin": api.ReasonApprovalRequired} {
		d := Decide(m, &Request{Principal: "agent", Tool: "run", Args: &ExecArgs{Argv: strings.Fields(argv)}})
		if d.Reason != want {
			t.Errorf("%s: %s, want %s", argv, d.Reason, want)
		}
	}
	if m.Tools["run"].EffectiveApprovers() != 2 {
		t.Error("approvers")
	}
}
