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
