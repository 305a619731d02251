package authz

import (
	"errors"
	"strings"
	"testing"
)

// TestRedactKeys: what each shape of the redact key compiles to for a
// tool, and the load errors that name a bad pattern (docs/manifest.md,
// "Redaction").
func TestRedactKeys(t *testing.T) {
	const in = "id AKIAIOSFODNN7EXAMPLE TCK-123456 pw=hunter2"
	for _, c := range []struct {
		name, redact, tool string
		want, err          string
	}{
		{"absent: off", ``, ``, in, ""},
		{"manifest-wide, builtins by default", `"redact":{},`, ``, "id [REDACTED:aws_access_key_id] TCK-123456 pw=hunter2", ""},
		{"manifest-wide patterns", `"redact":{"patterns":[{"name":"ticket","regex":"TCK-[0-9]{6}"}]},`, ``,
			"id [REDACTED:aws_access_key_id] [REDACTED:ticket] pw=hunter2", ""},
		{"tool adds patterns, turns builtins off", `"redact":{"patterns":[{"name":"ticket","regex":"TCK-[0-9]{6}"}]},`,
			`,"redact":{"builtin":false,"patterns":[{"name":"pw","regex":"pw=\\S+"}]}`, "id AKIAIOSFODNN7EXAMPLE [REDACTED:ticket] [REDACTED:pw]", ""},
		{"tool only", ``, `,"redact":{"builtin":true}`, "id [REDACTED:aws_access_key_id] TCK-123456 pw=hunter2", ""},
		{"nothing to redact", ``, `,"redact":{"builtin":false}`, in, ""},
		{"bad regex", `"redact":{"patterns":[{"name":"a","regex":"(x"}]},`, ``, "", `redact.patterns[0]: regex "(x"`},
		{"anchor", ``, `,"redact":{"patterns":[{"name":"a","regex":"x"},{"name":"b","regex":"x$"}]}`, "", `tools.r.redact.patterns[1]: regex "x$": anchors`},
		{"line break", ``, `,"redact":{"patterns":[{"name":"a","regex":"a\\nb"}]}`, "", `tools.r.redact.patterns[0]`},
		{"bad name", `"redact":{"patterns":[{"name":"A B","regex":"x"}]},`, ``, "", `redact.patterns[0]: name "A B"`},
		{"unknown key", `"redact":{"builtins":true},`, ``, "", `builtins`},
	} {
		doc := `{"schema_version":1,` + c.redact + `"tools":{"r":{"operation":"read","roots":["a"]` + c.tool + `}}}`
		m, err := Parse(strings.NewReader(doc), "/base")
		if c.err != "" {
			var me *ManifestError
			if err == nil || !errors.As(err, &me) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error with %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := in
		if s := m.Tools["r"].Redactor(); s != nil {
			b, _ := s.Redact([]byte(in))
			got = string(b)
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestRedactTOML: the TOML twin of a redact key compiles the same.
func TestRedactTOML(t *testing.T) {
	doc := `schema_version = 1
[redact]
builtin = false
patterns = [{name = "ticket", regex = 'TCK-[0-9]{6}'}]
[tools.r]
operation = "read"
roots = ["a"]
`
	m, err := ParseTOML(strings.NewReader(doc), "/base")
	if err != nil {
		t.Fatal(err)
	}
	b, n := m.Tools["r"].Redactor().Redact([]byte("TCK-123456 AKIAIOSFODNN7EXAMPLE"))
	if string(b) != "[REDACTED:ticket] AKIAIOSFODNN7EXAMPLE" || n.Total() != 1 {
		t.Fatalf("%q %v", b, n)
	}
	_, err = ParseTOML(strings.NewReader(strings.Replace(doc, "builtin", "Builtin", 1)), "/base")
	if err == nil || !strings.Contains(err.Error(), "Builtin") {
		t.Fatalf("a misspelled key: %v", err)
	}
}
