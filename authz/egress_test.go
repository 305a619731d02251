package authz

import (
	"strings"
	"testing"
)

// TestExecEgressKey: egress is an execute key, structurally checked here
// (hosts non-empty, no spaces or NUL, no proxy variable in env, no
// unknown member); file tools refuse it; TOML reads it as JSON does.
func TestExecEgressKey(t *testing.T) {
	exec := func(v string) string {
		return `{"schema_version":1,"tools":{"t":{"operation":"execute","commands":[["true"]]` + v + `}}}`
	}
	m, err := Parse(strings.NewReader(exec(`,"egress":{"hosts":["pypi.org","localhost:8080"],"schemes":["https","http"],"max_bytes_out":1024,"insecure_allow_private":true}`)), "/b")
	if err != nil {
		t.Fatal(err)
	}
	if e := m.Tools["t"].Egress; e == nil || len(e.Hosts) != 2 || e.MaxBytesOut != 1024 || !e.InsecureAllowPrivate || len(e.Schemes) != 2 {
		t.Fatalf("egress: %+v", e)
	}
	for _, c := range []struct{ extra, key string }{
		{`,"egress":{}`, "tools.t.egress.hosts"},
		{`,"egress":{"hosts":[]}`, "tools.t.egress.hosts"},
		{`,"egress":{"hosts":["a.example","b example"]}`, "tools.t.egress.hosts[1]"},
		{`,"egress":{"hosts":["a\u0000b"]}`, "tools.t.egress.hosts[0]"},
		{`,"egress":{"hosts":["a.example"],"schemes":[""]}`, "tools.t.egress.schemes[0]"},
		{`,"egress":{"hosts":["a.example"],"max_bytes_out":-1}`, "tools.t.egress.max_bytes_out"},
		{`,"egress":{"hosts":["a.example"]},"env":{"HTTPS_PROXY":"http://evil:1"}`, "tools.t.env.HTTPS_PROXY"},
		{`,"egress":{"hosts":["a.example"],"dns":true}`, "dns"},
	} {
		_, err := Parse(strings.NewReader(exec(c.extra)), "/b")
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s: %v, want an error naming %s", c.extra, err, c.key)
		}
	}
	_, err = Parse(strings.NewReader(`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["w"],"egress":{"hosts":["a.example"]}}}}`), "/b")
	if err == nil || !strings.Contains(err.Error(), "tools.r.egress") || !strings.Contains(err.Error(), "execute") {
		t.Errorf("on a read tool: %v", err)
	}
	j, err := Parse(strings.NewReader(exec(`,"egress":{"hosts":["pypi.org"],"max_bytes_out":10}`)), "/b")
	if err != nil {
		t.Fatal(err)
	}
	tm, err := ParseFile("m.toml", strings.NewReader("schema_version = 1\n[tools.t]\noperation = 'execute'\ncommands = [['true']]\n[tools.t.egress]\nhosts = ['pypi.org']\nmax_bytes_out = 10\n"), "/b")
	if err != nil {
		t.Fatal(err)
	}
	if tm.Version != j.Version {
		t.Errorf("TOML %s, JSON %s", tm.Version, j.Version)
	}
	_, err = ParseFile("m.toml", strings.NewReader("schema_version = 1\n[tools.t]\noperation = 'execute'\ncommands = [['true']]\n[tools.t.egress]\nhosts = ['pypi.org']\nproxy = 'x'\n"), "/b")
	if err == nil || !strings.Contains(err.Error(), "tools.t.egress.proxy") {
		t.Errorf("unknown TOML key: %v", err)
	}
}
