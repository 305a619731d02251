package authz

import (
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/foldname"
)

// toolIndex is a tool's rule compiled once at Parse, so that Decide splits
// only the request's path and formats no strings: a decision is on every
// call's path and must cost well under a microsecond.
type toolIndex struct {
	key         string     // "tools.NAME"
	roots       [][]string // each root's components
	rootClean   []string
	rootKeys    []string // "tools.NAME.roots[i]"
	never       []glob
	neverKeys   []string // "tools.NAME.never[i]"
	commandKeys []string // "tools.NAME.commands[i]"
	patterns    []cmdPattern
	refuseLinks bool   // Tool.RefusesHardLinks
	linksKey    string // "tools.NAME.hard_links": the rule of a refused hard link

	when *whenIndex // approval_when (approval_scale.go)
}

type glob struct {
	name  namePat   // for patterns without '/': matched against each name
	comps []namePat // for patterns with '/': matched against the path
	slash bool
}

// namePat matches one path component. Most never globs are a literal
// (".env") or a star with a literal ("*.pem"); those skip the general
// matcher. A name matches when it matches byte for byte (s), or when its
// fold or its key (foldname) matches the glob folded at load (f, toks): a
// case-insensitive disk opens ".env" for ".ENV", one that drops trailing
// dots and spaces for ".env." too, so those are hidden. The glob itself
// keeps its trailing dots: "tmp." hides "TMP." (ext4 casefold keeps the
// dot) but not "tmp", which no disk opens for a file "tmp.".
type namePat struct {
	kind int
	s    string // the pattern part as written
	f    string // literal, suffix or prefix folded (foldname)
	toks []tok  // patGeneral: the pattern folded, for keys
}

const (
	patLiteral = iota
	patAny     // *
	patSuffix  // *s
	patPrefix  // s*
	patGeneral // anything else: path.Match, and matchToks on keys
	patDeep    // ** (only in patterns with '/')
)

func compileName(p string) namePat {
	const meta = `*?[\`
	switch {
	case p == "**":
		return namePat{kind: patDeep}
	case p == "*":
		return namePat{kind: patAny}
	case !strings.ContainsAny(p, meta):
		return namePat{kind: patLiteral, s: p, f: foldname.Fold(p)}
	case p[0] == '*' && !strings.ContainsAny(p[1:], meta):
		return namePat{kind: patSuffix, s: p[1:], f: foldname.Fold(p[1:])}
	case p[len(p)-1] == '*' && !strings.ContainsAny(p[:len(p)-1], meta):
		return namePat{kind: patPrefix, s: p[:len(p)-1], f: foldname.Fold(p[:len(p)-1])}
	}
	return namePat{kind: patGeneral, s: p, toks: compileToks(p)}
}

// match reports whether a component matches, given as written, as its
// fold (foldname.Fold) and as its key (the fold without trailing dots and
// spaces, foldname.Key).
func (n *namePat) match(name, fold, key string) bool {
	switch n.kind {
	case patLiteral:
		return n.s == name || n.f == fold || n.f == key
	case patAny:
		return true
	case patSuffix:
		return strings.HasSuffix(name, n.s) || strings.HasSuffix(fold, n.f) || strings.HasSuffix(key, n.f)
	case patPrefix:
		return strings.HasPrefix(name, n.s) || strings.HasPrefix(fold, n.f) || strings.HasPrefix(key, n.f)
	case patDeep:
		return false
	}
	if ok, _ := path.Match(n.s, name); ok {
		return true
	}
	return matchToks(n.toks, fold) || len(key) != len(fold) && matchToks(n.toks, key)
}

// tok is one part of a general glob, folded for matching keys.
type tok struct {
	kind int    // tokLit, tokStar, tokOne, tokClass
	s    string // tokLit: folded literal; tokClass: the class as written, "[...]"
}

const (
	tokLit = iota
	tokStar
	tokOne
	tokClass
)

// compileToks splits a valid path.Match pattern (validateGlob checked it)
// into folded tokens: literal runs are folded like names; '*' and '?' stay; a
// class is kept as written and tested against every rune that folds to
// the key's rune (foldname.Variants), so [a-z] matches the key of "Q".
func compileToks(p string) []tok {
	var out []tok
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			out = append(out, tok{kind: tokLit, s: foldname.Fold(lit.String())})
			lit.Reset()
		}
	}
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '*':
			flush()
			if len(out) == 0 || out[len(out)-1].kind != tokStar {
				out = append(out, tok{kind: tokStar})
			}
		case '?':
			flush()
			out = append(out, tok{kind: tokOne})
		case '\\':
			if i+1 < len(p) {
				i++
				lit.WriteByte(p[i])
			}
		case '[':
			flush()
			j := i + 1
			if j < len(p) && p[j] == '^' {
				j++
			}
			for j < len(p) && p[j] != ']' {
				if p[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(p) {
				j = len(p) - 1
			}
			out = append(out, tok{kind: tokClass, s: p[i : j+1]})
			i = j
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return out
}

// matchToks matches a key against folded tokens; '*' backtracks as in
// path.Match. Keys are at most a few hundred bytes and globs are the
// operator's, so the backtracking stays small.
func matchToks(toks []tok, s string) bool {
	for len(toks) > 0 {
		t := &toks[0]
		toks = toks[1:]
		switch t.kind {
		case tokLit:
			if !strings.HasPrefix(s, t.s) {
				return false
			}
			s = s[len(t.s):]
		case tokStar:
			if len(toks) == 0 {
				return true
			}
			for i := 0; ; {
				if matchToks(toks, s[i:]) {
					return true
				}
				if i == len(s) {
					return false
				}
				_, w := utf8.DecodeRuneInString(s[i:])
				i += w
			}
		case tokOne, tokClass:
			if s == "" {
				return false
			}
			r, w := utf8.DecodeRuneInString(s)
			if t.kind == tokClass && !classMatch(t.s, r) {
				return false
			}
			s = s[w:]
		}
	}
	return s == ""
}

// classMatch reports whether the class matches r or a rune that folds to
// r: a name may spell the key's rune in any of them.
func classMatch(class string, r rune) bool {
	var buf [utf8.UTFMax]byte
	return foldname.Variants(r, func(v rune) bool {
		ok, _ := path.Match(class, string(utf8.AppendRune(buf[:0], v)))
		return ok
	})
}

func buildIndex(name string, t *Tool) *toolIndex {
	key := "tools." + name
	ix := &toolIndex{key: key, refuseLinks: t.RefusesHardLinks(), linksKey: key + ".hard_links"}
	for i, r := range t.Roots {
		ix.roots = append(ix.roots, splitPath(r, nil))
		ix.rootClean = append(ix.rootClean, path.Clean(r))
		ix.rootKeys = append(ix.rootKeys, key+".roots["+strconv.Itoa(i)+"]")
	}
	for i, g := range t.Never {
		ix.never = append(ix.never, compileGlob(g))
		ix.neverKeys = append(ix.neverKeys, key+".never["+strconv.Itoa(i)+"]")
	}
	for i := range t.Commands {
		ix.commandKeys = append(ix.commandKeys, key+".commands["+strconv.Itoa(i)+"]")
	}
	ix.patterns = compilePatterns(t)
	ix.when = compileWhen(t)
	return ix
}

// compileGlob compiles one glob validateGlob accepted (a never or keep
// glob).
func compileGlob(g string) glob {
	gl := glob{slash: strings.Contains(g, "/")}
	switch {
	case gl.slash:
		for _, c := range splitPath(g, nil) {
			gl.comps = append(gl.comps, compileName(c))
		}
	case g == "**":
		// "**" spans components only in a pattern with '/'; alone it
		// is a name glob that matches every name, as "*" does.
		gl.name = namePat{kind: patAny}
	default:
		gl.name = compileName(g)
	}
	return gl
}

// index returns the tool's compiled rule, compiling it for a Tool that did
// not come from Parse (tests, tools built by hand).
func (t *Tool) index() *toolIndex {
	if t.idx != nil {
		return t.idx
	}
	return buildIndex("?", t)
}
