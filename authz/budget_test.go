package authz

import (
	"strings"
	"testing"
)

const budgetTool = `"tools":{"r":{"operation":"read","roots":["a"]}}`

// TestBudgetsParse: rate and denial_budget on a principal read the same
// from JSON and TOML, take their defaults, and change the policy_version.
func TestBudgetsParse(t *testing.T) {
	js := `{"schema_version":1,"principals":{"agent":{"uids":[1000],"tools":["*"],
	  "rate":{"per_second":2.5},"denial_budget":{"denials":20,"window_s":300}},
	  "ops":{"uids":[0],"tools":[],"approver":true}},` + budgetTool + `}`
	toml := `schema_version = 1
[principals.agent]
uids = [1000]
tools = ["*"]
rate = { per_second = 2.5 }
[principals.agent.denial_budget]
denials = 20
window_s = 300
[principals.ops]
uids = [0]
tools = []
approver = true
[tools.r]
operation = "read"
roots = ["a"]
`
	mj, err := ParseFile("m.json", strings.NewReader(js), "/base")
	if err != nil {
		t.Fatal(err)
	}
	mt, err := ParseFile("m.toml", strings.NewReader(toml), "/base")
	if err != nil {
		t.Fatal(err)
	}
	if mj.Version != mt.Version {
		t.Errorf("JSON and TOML twins differ: %s\n%s", mj.Canonical, mt.Canonical)
	}
	r, b := mj.Budgets("agent")
	if r == nil || r.PerSecond != 2.5 || r.EffectiveBurst() != 3 || b == nil || b.Denials != 20 || b.WindowS != 300 {
		t.Fatalf("agent's budgets: %+v %+v", r, b)
	}
	if r, b := mj.Budgets("ops"); r != nil || b != nil {
		t.Errorf("ops has none: %+v %+v", r, b)
	}
	if r, b := mj.Budgets(LocalPrincipal); r != nil || b != nil {
		t.Errorf("local has none: %+v %+v", r, b)
	}
	plain, err := Parse(strings.NewReader(`{"schema_version":1,"principals":{"agent":{"uids":[1000],"tools":["*"]},
	  "ops":{"uids":[0],"tools":[],"approver":true}},`+budgetTool+`}`), "/base")
	if err != nil {
		t.Fatal(err)
	}
	if plain.Version == mj.Version {
		t.Error("a budget does not change the policy_version")
	}
	if (&Rate{PerSecond: 0.2}).EffectiveBurst() != 1 || (&Rate{PerSecond: 5, Burst: 2}).EffectiveBurst() != 2 {
		t.Error("burst defaults")
	}
}

// TestBudgetsRefused: a bad or unknown budget key is a load error naming
// its place and the fix, in JSON and TOML.
func TestBudgetsRefused(t *testing.T) {
	principal := func(extra string) string {
		return `{"schema_version":1,"principals":{"agent":{"uids":[1000],"tools":["*"],` + extra + `}},` + budgetTool + `}`
	}
	for _, c := range []struct{ name, file, doc, want string }{
		{"no rate", "m.json", principal(`"rate":{}`), `m.json:1:79: principals.agent.rate.per_second: is 0; use a number of calls per second above 0 and at most 1000000, e.g. 5 or 0.5`},
		{"negative rate", "m.json", principal(`"rate":{"per_second":-1}`), `principals.agent.rate.per_second: is -1;`},
		{"too fast", "m.json", principal(`"rate":{"per_second":1e9}`), `principals.agent.rate.per_second: is 1e+09;`},
		{"negative burst", "m.json", principal(`"rate":{"per_second":1,"burst":-2}`), `principals.agent.rate.burst: is -2; use 1 to`},
		{"fractional burst", "m.json", principal(`"rate":{"per_second":1,"burst":1.5}`),
			`principals.agent.rate.burst: a whole number of calls, e.g. 10, not the number 1.5`},
		{"rate per minute", "m.json", principal(`"rate":{"per_minute":1}`), `principals.agent.rate.per_minute: unknown key`},
		{"rate a number", "m.json", principal(`"rate":5`), `principals.agent.rate: an object (a table) such as {"per_second": 5, "burst": 10}, not the number 5`},
		{"no denials", "m.json", principal(`"denial_budget":{"window_s":60}`), `principals.agent.denial_budget.denials: is 0; use 1 to 10000 denials`},
		{"no window", "m.json", principal(`"denial_budget":{"denials":5}`), `principals.agent.denial_budget.window_s: is 0; use 1 to 604800 seconds`},
		{"window a string", "m.json", principal(`"denial_budget":{"denials":5,"window_s":"5m"}`),
			`principals.agent.denial_budget.window_s: a whole number of seconds, e.g. 300, not the string "5m"`},
		{"too many denials", "m.json", principal(`"denial_budget":{"denials":10001,"window_s":5}`), `principals.agent.denial_budget.denials: is 10001;`},
		{"budget misspelt", "m.json", principal(`"denial_budgets":{"denials":5,"window_s":5}`), `principals.agent.denial_budgets: unknown key`},
		{"TOML unknown", "m.toml", "schema_version = 1\n[principals.agent]\nuids = [1]\ntools = []\n[principals.agent.rate]\nper_second = 1\nbursts = 3\n[tools.r]\noperation = 'read'\nroots = ['a']\n",
			`m.toml:7: principals.agent.rate.bursts: unknown key`},
		{"TOML zero window", "m.toml", "schema_version = 1\n[principals.agent]\nuids = [1]\ntools = []\ndenial_budget = { denials = 3, window_s = 0 }\n[tools.r]\noperation = 'read'\nroots = ['a']\n",
			`principals.agent.denial_budget.window_s: is 0;`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseFile(c.file, strings.NewReader(c.doc), "/base")
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("got  %s\nwant %s", err, c.want)
			}
		})
	}
}
