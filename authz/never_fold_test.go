package authz

import (
	"strings"
	"testing"
)

// TestNeverFolded: a never glob hides every spelling a case-insensitive
// file system would open for a hidden name, and still every name it
// matches byte for byte.
func TestNeverFolded(t *testing.T) {
	tool := &Tool{Never: []string{".env", "*.pem", "private/**", "id_rsa*", "key[0-9].[a-c]", "*.k?y", "tmp.", "a.*"}}
	for _, c := range []struct {
		rel  string
		want bool
	}{
		{".env", true}, {"src/.ENV", true}, {".Env", true}, {".env.", true}, {".env ", true}, {".e\u200bnv", true},
		{"ID.PEM", true}, {"Id.Pem", true}, {"ıd.pem", true}, {"x.PEM.", true},
		{"PRIVATE/x", true}, {"Private./x/y", true},
		{"ID_RSA.pub", true}, {"ID_rsa", true},
		{"KEY1.B", true}, {"key1.b", true}, {"KEY1.D", false},
		{"a.KEY", true}, {"a.K\u200bEY.", true},
		{"tmp.", true}, {"TMP.", true}, {"TMP", false}, // no disk opens "tmp." for "tmp"
		{"a.", true}, {"A.", true}, {"A.B", true}, // ext4 casefold keeps the dot: "A." opens "a."
		{".еnv", false}, {"env", false}, {"src/main.py", false}, {"README.md", false}, {"pem", false},
	} {
		if got := NeverMatch(tool, c.rel); got != c.want {
			t.Errorf("NeverMatch(%q) = %v, want %v", c.rel, got, c.want)
		}
	}
}

func BenchmarkNeverMatchMixedCase(b *testing.B) {
	tool := &Tool{Never: []string{".env", "*.pem", "private/**"}}
	tool.idx = buildIndex("x", tool)
	b.ReportAllocs()
	for b.Loop() {
		if NeverMatch(tool, "pkg/Module/File.py") {
			b.Fatal("hidden")
		}
	}
}

// FuzzNeverFolded: whatever an ASCII name matches, its other spellings on
// a case-insensitive disk match too: any change of case, and a trailing
// dot or space where the disk drops them.
func FuzzNeverFolded(f *testing.F) {
	f.Add("*.pem", "id.pem")
	f.Add("[a-c]?x*", "bQx.")
	f.Add(`\*.k`, "*.k")
	f.Fuzz(func(t *testing.T, g, n string) {
		if validateGlob(g) != nil || strings.Contains(g, "/") || CheckPath(n) != "" || strings.Contains(n, "/") ||
			n == "." || n == ".." || strings.TrimRight(n, ". ") != n {
			return
		}
		for i := 0; i < len(n); i++ {
			if n[i] >= 0x80 {
				return
			}
		}
		tool := &Tool{Never: []string{g}}
		tool.idx = buildIndex("x", tool)
		if !NeverMatch(tool, n) {
			return
		}
		for _, v := range []string{strings.ToUpper(n), strings.ToLower(n), n + ".", n + " ", strings.ToUpper(n) + ". "} {
			if !NeverMatch(tool, v) {
				t.Fatalf("never %q hides %q but not %q", g, n, v)
			}
		}
	})
}

// TestReview4NeverDoubleStarAlone: a never glob "**" without '/' hides
// every name, as "*" and "**/**" do. It compiled to the deep-match
// component that only a pattern with '/' uses, which as a name glob
// matched nothing: never ["**"] hid nothing at all (fail-open).
// docs/security.md, "The fourth review"
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
// docs/security.md, "The fourth review"
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
