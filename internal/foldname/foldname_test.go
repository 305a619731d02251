package foldname

import (
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestKeyTable: names a case-insensitive file system takes for one file
// have one key; look-alikes that none of them merges keep theirs.
func TestKeyTable(t *testing.T) {
	same := [][]string{
		{".env", ".ENV", ".Env", ".env.", ".env ", ".env. .", ".e\u200bnv", "\ufeff.env", ".en\u00adv"},
		{"id.pem", "ID.PEM", "Id.Pem", "ıd.pem", "ID.PEM."},
		{"kelvin", "\u212Aelvin", "KELVIN"},
		{"strasse", "straße", "STRASSE", "STRAẞE", "Straße "},
		{"ſecret", "secret", "SECRET"},
		{"office", "o\ufb03ce", "of\ufb01ce"},
		{"i\u0307x", "İx"},
		{"a;b", "a\u037eb"},
		{"σ", "Σ", "ς"},
		{"ǆ", "ǅ", "Ǆ"},
		{"ω", "Ω", "\u2126"},
		{"å", "Å", "\u212b"},
		{"...", "..."},
	}
	for _, group := range same {
		k := Key(group[0])
		for _, n := range group[1:] {
			if got := Key(n); got != k {
				t.Errorf("Key(%q) = %q, want %q (as Key(%q))", n, got, k, group[0])
			}
			if !Equal(n, group[0]) {
				t.Errorf("Equal(%q, %q) = false", n, group[0])
			}
		}
	}
	differ := [][2]string{
		{".env", ".еnv"},     // Cyrillic е: a look-alike, not a case
		{".env", ".ｅnv"},     // fullwidth: a compatibility form (NFKC), not folded
		{"env", "env\u0301"}, // a combining mark is a character
		{"ix", "İx"},         // İ folds to i + U+0307, not to i
		{".env", ".envv"},
		{"a", "b"},
		{".", ".."},
	}
	for _, d := range differ {
		if Equal(d[0], d[1]) {
			t.Errorf("Equal(%q, %q): these are not one name on any file system we claim", d[0], d[1])
		}
	}
	if got := Key(" "); got != " " {
		t.Errorf("Key(%q) = %q: a name of only spaces keeps them", " ", got)
	}
}

// TestKeyIsUnionOfFoldings: for every rune, the key is the same as that of
// its simple case folding orbit (Linux casefold, FUSE, SMB) and of its upper
// case (the NTFS and exFAT upcase table), and the key of the key is itself.
func TestKeyIsUnionOfFoldings(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xD800 && r <= 0xDFFF || r == '/' || r == 0 {
			continue
		}
		s := string(r)
		k := Key(s)
		if Key(k) != k && k != "." && k != " " {
			t.Errorf("U+%04X: Key not idempotent: %q -> %q", r, k, Key(k))
		}
		if u := unicode.ToUpper(r); Key(string(u)) != k {
			t.Errorf("U+%04X: Key %q, its upper case U+%04X keys %q", r, k, u, Key(string(u)))
		}
		if f := unicode.SimpleFold(r); Key(string(f)) != k {
			t.Errorf("U+%04X: Key %q, SimpleFold U+%04X keys %q", r, k, f, Key(string(f)))
		}
		// A class test sees every rune that folds to a key rune.
		e, fr := FoldRune(r)
		if fr >= 0 && !Variants(fr, func(v rune) bool { return v == r }) {
			t.Errorf("U+%04X folds to U+%04X, whose Variants miss it", r, fr)
		}
		_ = e
	}
}

func TestAllocs(t *testing.T) {
	n := testing.AllocsPerRun(100, func() {
		_ = Key("file.py")
		_ = IsKey("module")
		_ = HasPrefix("main.go", ".sluice-tmp-")
	})
	if n != 0 {
		t.Errorf("%v allocations for names that are their own keys", n)
	}
}

func TestHasPrefix(t *testing.T) {
	for _, n := range []string{".sluice-tmp-x", ".SLUICE-TMP-x", ".Sluice-Tmp-"} {
		if !HasPrefix(n, ".sluice-tmp-") {
			t.Errorf("HasPrefix(%q) = false", n)
		}
	}
	if HasPrefix(".sluice-tm", ".sluice-tmp-") {
		t.Error("HasPrefix of a shorter name")
	}
}

func FuzzKey(f *testing.F) {
	f.Add(".ENV.")
	f.Add("STRAẞE")
	f.Fuzz(func(t *testing.T, s string) {
		k := Key(s)
		if utf8.ValidString(s) && !utf8.ValidString(k) {
			t.Fatalf("Key(%q) = %q is not UTF-8", s, k)
		}
		// Idempotence holds for names that are UTF-8. In a name that is
		// not, dropping an ignorable between two stray bytes can join them
		// into a rune ("\xd8\u0601\x81" -> "\xd8\x81", U+0601 again):
		// such a name is keyed once, byte for byte where it is not UTF-8,
		// and that only hides more (globs are UTF-8), never less.
		if utf8.ValidString(s) && Key(k) != k && TrimTrailing(k) == k {
			t.Fatalf("Key not idempotent: %q -> %q -> %q", s, k, Key(k))
		}
	})
}
