package authz

import "testing"

// TestReview4NeverDoubleStarAlone: a never glob "**" without '/' hides
// every name, as "*" and "**/**" do. It compiled to the deep-match
// component that only a pattern with '/' uses, which as a name glob
// matched nothing: never ["**"] hid nothing at all (fail-open).
func TestReview4NeverDoubleStarAlone(t *testing.T) {
	for _, g := range []string{"**", "*", "**/**", "**/", "./**"} {
		tool := &Tool{Never: []string{g}}
		for _, rel := range []string{"a", "a/b", ".env", "d/e/f.pem"} {
			if !NeverMatch(tool, rel) {
				t.Errorf("never [%q]: %q not hidden", g, rel)
			}
		}
	}
}

// TestReview4NeverNestedRoots: a path resolved beneath the outer of two
// nested roots is hidden by a glob anchored at the inner one.
func TestReview4NeverNestedRoots(t *testing.T) {
	tool := &Tool{Operation: "read", Roots: []string{"ws", "ws/src"}, Never: []string{"private/**"}}
	for _, c := range []struct {
		root int
		rel  string
		want bool
	}{
		{0, "src/private/k", true}, {0, "src/private", true}, {1, "private/k", true},
		{0, "private/k", true}, {0, "SRC/private/k", true}, {0, "Src./Private/k", true}, {0, "src/main.py", false}, {0, "other/private2", false}, {1, "main.py", false},
	} {
		if got := NeverMatchResolved(tool, c.root, c.rel); got != c.want {
			t.Errorf("NeverMatchResolved(root %d, %q) = %v, want %v", c.root, c.rel, got, c.want)
		}
	}
}
