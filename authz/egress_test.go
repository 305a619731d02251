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

// TestArgsRecordBounded: what a decision record keeps of a call's args is
// bounded, still says which call it was, and holds no query value of a
// fetch's or post's URL; replay rebuilds from it a URL decided as the one
// sent (docs/security.md, "The third review").
func TestArgsRecordBounded(t *testing.T) {
	m := parse(t, `{"schema_version":1,"tools":{
	  "run":{"operation":"execute","commands":[["true"]]},
	  "get":{"operation":"fetch","hosts":["api.example"]},
	  "hook":{"operation":"post","webhooks":["https://hooks.example/h/*?sig=abc"]}}}`)
	long := strings.Repeat("A", 20000)
	for _, c := range []struct {
		tool, args string
		has        []string // in the record
		decidable  bool
		url        string // the URL replay decides on, when decidable
	}{
		{"run", `{"argv":["python3","-c","` + long + `"]}`, []string{`"elided":true`, `"argv0":"python3"`, `"argc":3`}, false, ""},
		{"run", `{"argv":["` + long + `"]}`, []string{`"elided":true`, `"argv0":"AAAA`, `…[cut: 20000 bytes, sha256:`}, false, ""},
		{"run", `{"argv":["true"]}`, []string{`{"argv":["true"]}`}, true, ""},
		{"get", `{"url":"https://api.example/v1?api_key=SECRET123&q=go"}`, []string{`api_key=\u003csha256:`, `\u0026q=\u003csha256:`}, true, "https://api.example/v1"},
		{"get", `{"url":"https://api.example/v1?api_key=SECRET123 x"}`, []string{`"url_invalid":true`}, true, ""},
		{"get", `{"url":"https://api.example/v1#SECRET123"}`, []string{`v1#\u003csha256:`}, true, "https://api.example/v1"},
		{"hook", `{"url":"https://hooks.example/h/x?sig=abc","body":{}}`, []string{`sig=\u003csha256:`, `"query_sha256":"sha256:`}, true, "https://hooks.example/h/x?sig=abc"},
		{"hook", `{"url":"https://hooks.example/h/x?sig=SECRET123","body":{}}`, []string{`"query_sha256":"sha256:`}, true, ""},
		{"hook", `{"url":"https://hooks.example/h/x?","body":{}}`, []string{`x?"`}, true, "https://hooks.example/h/x?"},
	} {
		tl := m.Tools[c.tool]
		o := LookupOp(tl.Operation)
		a, err := o.DecodeArgs(tl, []byte(c.args))
		if err != nil {
			t.Fatalf("%.80s: %v", c.args, err)
		}
		rec := string(a.Record)
		if len(rec) > MaxArgsRecord+400 || strings.Contains(rec, "SECRET123") {
			t.Errorf("%.80s: record of %d bytes: %.300s", c.args, len(rec), rec)
		}
		for _, h := range c.has {
			if !strings.Contains(rec, h) {
				t.Errorf("%.80s: record %.300s lacks %s", c.args, rec, h)
			}
		}
		b, ok := o.ArgsFromRecord(tl, a.Record)
		if ok != c.decidable {
			t.Errorf("%.80s: re-decidable %v, want %v", c.args, ok, c.decidable)
		}
		var u *string
		if len(o.Targets) > 0 {
			u = o.Targets[0].Value(b.Value)
		}
		if ok && u != nil && *u != c.url {
			t.Errorf("%.80s: replay decides on %q, want %q", c.args, *u, c.url)
		}
	}
}
