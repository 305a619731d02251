package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// reasonConstants parses api.go and returns every constant declared with
// type Reason, so the test holds Reasons to the source, not to itself
// (docs/security.md "The third review": egress_denied and upstream_error
// were declared and missing from Reasons, and a loop over Reasons could
// not see it).
func reasonConstants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "api.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			id, ok := vs.Type.(*ast.Ident)
			if !ok || id.Name != "Reason" {
				continue
			}
			for i, n := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s: a Reason constant must be a string literal", n.Name)
				}
				consts[n.Name] = strings.Trim(lit.Value, "\"`")
			}
		}
	}
	return consts
}

// TestReasonsDocumented: reason codes are a stable contract, so every
// Reason constant in api.go is listed exactly once in Reasons, Reasons
// holds nothing else, and each has a row in docs/reasons.md's table.
func TestReasonsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/reasons.md")
	if err != nil {
		t.Fatal(err)
	}
	table := string(doc)
	consts := reasonConstants(t)
	if len(consts) < 20 {
		t.Fatalf("found only %d Reason constants in api.go: the parse is wrong", len(consts))
	}
	listed := map[Reason]int{}
	for _, r := range Reasons {
		listed[r]++
	}
	declared := map[Reason]bool{}
	for name, v := range consts {
		declared[Reason(v)] = true
		if listed[Reason(v)] != 1 {
			t.Errorf("%s (%q) is listed %d times in Reasons, want once", name, v, listed[Reason(v)])
		}
	}
	for r := range listed {
		if !declared[r] {
			t.Errorf("Reasons lists %q, which no Reason constant in api.go declares", r)
		}
	}
	for _, v := range consts {
		if !strings.Contains(table, "| `"+v+"`") && !strings.Contains(table, ", `"+v+"`") {
			t.Errorf("docs/reasons.md has no row for %s", v)
		}
	}
}
