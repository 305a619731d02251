package authz

import "testing"

// TestNeverFolded: a never glob hides every spelling a case-insensitive
// file system would open for a hidden name, and still every name it
// matches byte for byte.
func TestNeverFolded(t *testing.T) {
	tool := &Tool{Never: []string{".env", "*.pem", "private/**", "id_rsa*", "key[0-9].[a-c]", "*.k?y", "tmp."}}
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
		{"tmp.", true}, {"TMP", true}, // on vfat, "tmp." is "tmp"
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
