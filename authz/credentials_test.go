package authz

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// TestCredentialsKey: credentials is a fetch and post key, in JSON and
// TOML alike, each entry strict ({header, value_file}, nothing else); its
// host must be one the tool may reach; an execute tool's egress refuses
// it with why; an agent-supplied header of its name for its host is
// invalid_args; an approver is told a credential is added, never what.
func TestCredentialsKey(t *testing.T) {
	fetch := func(creds string) string {
		return `{"schema_version":1,"tools":{"f":{"operation":"fetch","hosts":["api.example.com","other.example.com"],
		  "allowed_headers":["Accept","Authorization"],"approval":"human","credentials":` + creds + `}}}`
	}
	const good = `{"api.example.com":{"header":"Authorization","value_file":"/etc/sluice/secrets/example-token"}}`
	m, err := Parse(strings.NewReader(fetch(good)), "/b")
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Tools["f"].Credentials["api.example.com"]; c == nil || c.Header != "Authorization" || c.ValueFile != "/etc/sluice/secrets/example-token" {
		t.Fatalf("credentials: %+v", m.Tools["f"].Credentials)
	}
	tm, err := ParseFile("m.toml", strings.NewReader(`schema_version = 1
[tools.f]
operation = "fetch"
hosts = ["api.example.com", "other.example.com"]
allowed_headers = ["Accept", "Authorization"]
approval = "human"
[tools.f.credentials."api.example.com"]
header = "Authorization"
value_file = "/etc/sluice/secrets/example-token"
`), "/b")
	if err != nil {
		t.Fatal(err)
	}
	if tm.Version != m.Version {
		t.Errorf("TOML %s, JSON %s", tm.Version, m.Version)
	}
	post := `{"schema_version":1,"tools":{"p":{"operation":"post","webhooks":["https://hooks.example.com/in/*"],
	  "credentials":{"hooks.example.com":{"header":"X-Hook-Token","value_file":"/etc/sluice/secrets/hook"}}}}}`
	if _, err := Parse(strings.NewReader(post), "/b"); err != nil {
		t.Fatalf("post: %v", err)
	}

	for _, c := range []struct{ manifest, want string }{
		{fetch(`{"evil.example.com":{"header":"Authorization","value_file":"/etc/s"}}`), "credentials.evil.example.com: not a host this tool may reach"},
		{fetch(`{"api.example.com":{"header":"Authorization","value_file":"/etc/s","value":"x"}}`), "tools.f.credentials.api.example.com.value: unknown key"},
		{fetch(`{"api.example.com":{"Header":"Authorization","value_file":"/etc/s"}}`), "tools.f.credentials.api.example.com.Header: unknown key"},
		{fetch(`{"api.example.com":{"value_file":"/etc/s"}}`), "tools.f.credentials.api.example.com.header: missing"},
		{fetch(`{"api.example.com":{"header":"Authorization"}}`), "tools.f.credentials.api.example.com.value_file: missing"},
		{fetch(`{"api.example.com":{"header":"Authorization","value_file":"secrets/t"}}`), "tools.f.credentials.api.example.com.value_file"},
		{fetch(`{"api.example.com":{"header":"Authorization","value_file":"/etc/../tmp/t"}}`), "tools.f.credentials.api.example.com.value_file"},
		{fetch(`{"api.example.com":null}`), "tools.f.credentials.api.example.com: is null"},
		{fetch(`{"api.example.com":{"header":"Host","value_file":"/etc/s"}}`), "cannot carry a credential"},
		{fetch(`{"*.example.com":{"header":"Authorization","value_file":"/etc/s"}}`), "no wildcard"},
		{`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["w"],"credentials":{}}}}`, "tools.r.credentials: does not apply to read tools; it applies to fetch and post tools"},
		{`{"schema_version":1,"tools":{"t":{"operation":"execute","commands":[["true"]],"egress":{"hosts":["api.example.com"],
		  "credentials":{"api.example.com":{"header":"Authorization","value_file":"/etc/s"}}}}}}`, "tools.t.egress.credentials: the command proxy relays HTTPS it cannot read"},
	} {
		_, err := Parse(strings.NewReader(c.manifest), "/b")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant %q", c.manifest, err, c.want)
		}
	}

	// The agent may set Authorization for another host, not for the
	// credential's.
	tl := m.Tools["f"]
	decode := func(args string) *Args {
		t.Helper()
		a, err := opFetch.DecodeArgs(tl, []byte(args))
		if err != nil || a.Invalid != "" {
			t.Fatalf("%s: %v %s", args, err, a.Invalid)
		}
		return &a
	}
	for _, c := range []struct {
		url    string
		reason api.Reason
	}{
		{"https://api.example.com/v1", api.ReasonInvalidArgs},
		{"https://other.example.com/v1", api.ReasonApprovalRequired},
	} {
		a := decode(`{"url":"` + c.url + `","headers":{"authorization":"Bearer mine"}}`)
		res := Resource{Outcome: OutcomeOK, Addrs: []string{"140.82.112.6"}, Net: opFetch.NetTarget(tl, a.Value)}
		if res.Net.Refused() {
			res = Resource{Outcome: OutcomeRefused, Net: res.Net}
		}
		d := Decide(m, &Request{Principal: LocalPrincipal, Tool: "f", Args: a.Value, Resolved: [][]Resource{{res}}})
		if d.Reason != c.reason {
			t.Errorf("%s: %s (%s), want %s", c.url, d.Reason, d.Rule, c.reason)
		}
	}
	// An approver is told a credential goes with the request.
	ch := opFetch.Approval(tl, decode(`{"url":"https://api.example.com/v1"}`))
	found := false
	for _, f := range ch.Summary {
		if f.Label == "credential" && strings.Contains(f.Value, "Authorization for api.example.com") {
			found = true
		}
	}
	if !found {
		t.Errorf("approval summary %+v names no credential", ch.Summary)
	}
	// The agent's schema says which header sluiced adds, for which host.
	sch, _ := json.Marshal(opFetch.schema(tl))
	if !strings.Contains(string(sch), "sluiced adds Authorization for api.example.com itself") {
		t.Errorf("schema: %s", sch)
	}
}
