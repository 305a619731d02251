package authz

import (
	"path"
	"strconv"
	"strings"
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
}

type glob struct {
	name  namePat   // for patterns without '/': matched against each name
	comps []namePat // for patterns with '/': matched against the path
	slash bool
}

// namePat matches one path component. Most never globs are a literal
// (".env") or a star with a literal ("*.pem"); those skip path.Match.
type namePat struct {
	kind int
	s    string
}

const (
	patLiteral = iota
	patAny     // *
	patSuffix  // *s
	patPrefix  // s*
	patGeneral // anything else: path.Match
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
		return namePat{kind: patLiteral, s: p}
	case p[0] == '*' && !strings.ContainsAny(p[1:], meta):
		return namePat{kind: patSuffix, s: p[1:]}
	case p[len(p)-1] == '*' && !strings.ContainsAny(p[:len(p)-1], meta):
		return namePat{kind: patPrefix, s: p[:len(p)-1]}
	}
	return namePat{kind: patGeneral, s: p}
}

func (n *namePat) match(name string) bool {
	switch n.kind {
	case patLiteral:
		return n.s == name
	case patAny:
		return true
	case patSuffix:
		return strings.HasSuffix(name, n.s)
	case patPrefix:
		return strings.HasPrefix(name, n.s)
	case patDeep:
		return false
	}
	ok, _ := path.Match(n.s, name)
	return ok
}

func buildIndex(name string, t *Tool) *toolIndex {
	key := "tools." + name
	ix := &toolIndex{key: key}
	for i, r := range t.Roots {
		ix.roots = append(ix.roots, splitPath(r, nil))
		ix.rootClean = append(ix.rootClean, path.Clean(r))
		ix.rootKeys = append(ix.rootKeys, key+".roots["+strconv.Itoa(i)+"]")
	}
	for i, g := range t.Never {
		gl := glob{slash: strings.Contains(g, "/")}
		if gl.slash {
			for _, c := range splitPath(g, nil) {
				gl.comps = append(gl.comps, compileName(c))
			}
		} else {
			gl.name = compileName(g)
		}
		ix.never = append(ix.never, gl)
		ix.neverKeys = append(ix.neverKeys, key+".never["+strconv.Itoa(i)+"]")
	}
	for i := range t.Commands {
		ix.commandKeys = append(ix.commandKeys, key+".commands["+strconv.Itoa(i)+"]")
	}
	return ix
}

// index returns the tool's compiled rule, compiling it for a Tool that did
// not come from Parse (tests, tools built by hand).
func (t *Tool) index() *toolIndex {
	if t.idx != nil {
		return t.idx
	}
	return buildIndex("?", t)
}
