package deptest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// notReasons are string literals outside api that spell a reason code but
// mean something else, by directory: each is its own vocabulary.
var notReasons = map[string]string{
	"audit task_cancelled": "audit.KindTaskCancelled, a record kind",
	"authz not_found":      "authz.OutcomeNotFound, a resolution outcome the ledger records",
	"egress timeout":       "UpstreamError.Op, which step of a request failed",
	"bench/soak timeout":   "a fragment of a Go error's text it matches",
}

// exempt are directories whose literals are test data: internal/escapetest
// is the one escape table, compiled only into tests (STYLE.md habit 9).
var exempt = map[string]bool{"api": true, "internal/escapetest": true}

// TestReasonsSpelledOnlyInAPI: a reason code is written as a string only
// in api; everything else names api's constants or gets the reason from a
// typed error (internal/errclass). A package that spells "egress_denied"
// itself drifts from api unseen: egress once kept its own copies of the
// reason strings. Test files and docs are not scanned.
func TestReasonsSpelledOnlyInAPI(t *testing.T) {
	reasons := map[string]bool{api.ReasonUnavailable: true}
	for _, r := range api.Reasons {
		reasons[string(r)] = true
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files, used := 0, map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || exempt[rel]) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		dir := filepath.Dir(rel)
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil || !reasons[s] {
				return true
			}
			if key := dir + " " + s; notReasons[key] != "" {
				used[key] = true
				return true
			}
			t.Errorf("%s: the reason %q is spelled here: use api's constant, or a typed error that carries it (internal/errclass)", fset.Position(lit.Pos()), s)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("scanned only %d files from %s", files, root)
	}
	for key, why := range notReasons {
		if !used[key] {
			t.Errorf("notReasons[%q] (%s) matches nothing any more: remove it", key, why)
		}
	}
}
