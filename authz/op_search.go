package authz

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"regexp/syntax"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// Search bounds.
const (
	// DefaultSearchResults is a search's max_results when not given;
	// MaxSearchResults the most it may ask for.
	DefaultSearchResults = 100
	MaxSearchResults     = 10_000
	// maxSearchPattern bounds a name glob and a content regex, in bytes.
	maxSearchPattern = 1024
)

// SearchArgs are a search's args: {"path", "name"?, "content"?,
// "max_results"?}. A search walks beneath the directory path names (or
// looks in the one file it names) for entries whose name matches Name
// and regular files with lines that match Content; at least one of them.
type SearchArgs struct {
	Path       *string // nil when absent
	Name       string  // a glob; "" matches every name
	Content    string  // an RE2 regular expression; "" searches names only
	MaxResults int

	name    []string       // Name's segments
	content *regexp.Regexp // Content compiled
	whole   *regexp.Regexp // Content for a whole file (Prefilter)
}

func (a *SearchArgs) Subject() string { return derefOr(a.Path) }

// Regexp is the compiled content regex, matched against one line at a
// time (without its "\n"); nil for a search by name only.
func (a *SearchArgs) Regexp() *regexp.Regexp { return a.content }

// Prefilter is Regexp rewritten to run once over a whole file: it
// matches the file whenever Regexp matches one of its lines (a file it
// does not match has no matching line, and costs one pass); nil when
// there is none, and each line is matched. Text anchors
// (^, $, \A, \z outside (?m)) become line anchors; everything else
// matches in a line as it does in the file around it, or more.
func (a *SearchArgs) Prefilter() *regexp.Regexp { return a.whole }

// lineAnchors rewrites re's text anchors as line anchors.
func lineAnchors(re *syntax.Regexp) {
	switch re.Op {
	case syntax.OpBeginText:
		re.Op = syntax.OpBeginLine
	case syntax.OpEndText:
		re.Op = syntax.OpEndLine
	}
	for _, sub := range re.Sub {
		lineAnchors(sub)
	}
}

// MatchName reports whether the entry rel (its path relative to the
// searched directory, "/"-separated) matches the name glob: a glob
// without "/" is matched against the base name (*.go), one with "/"
// against the whole relative path, where a "**" segment matches any
// number of directories (src/**/*_test.go). Matching is exact (case
// sensitive, as the file system names it); every name matches "".
func (a *SearchArgs) MatchName(rel string) bool {
	switch {
	case a.Name == "":
		return true
	case len(a.name) == 1:
		ok, _ := path.Match(a.name[0], path.Base(rel))
		return ok
	}
	return matchSegs(a.name, strings.Split(rel, "/"))
}

// MatchBase reports whether a base name can match the glob: it matches
// the glob's last segment (any name when that is "**"). It is what a
// walk that sees one name at a time filters by; a PathGlob's matches are
// then checked with MatchName on their whole path.
func (a *SearchArgs) MatchBase(name string) bool {
	if len(a.name) == 0 {
		return true
	}
	last := a.name[len(a.name)-1]
	if last == "**" {
		return true
	}
	ok, _ := path.Match(last, name)
	return ok
}

// PathGlob says the glob has a "/": it matches whole relative paths, not
// base names alone.
func (a *SearchArgs) PathGlob() bool { return len(a.name) > 1 }

func matchSegs(pat, comps []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(comps); i++ {
				if matchSegs(pat[1:], comps[i:]) {
					return true
				}
			}
			return false
		}
		if len(comps) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], comps[0]); !ok {
			return false
		}
		pat, comps = pat[1:], comps[1:]
	}
	return len(comps) == 0
}

// searchArgs types sa, compiling its patterns, and says why it breaks a
// rule ("" when it does not).
func searchArgs(sa *api.SearchArgs) (*SearchArgs, string) {
	v := &SearchArgs{Path: sa.Path, Name: sa.Name, Content: sa.Content, MaxResults: DefaultSearchResults}
	switch {
	case sa.Path == nil:
		return v, "args.path: required"
	case sa.Name == "" && sa.Content == "":
		return v, "args: name, content or both required"
	case len(sa.Name) > maxSearchPattern:
		return v, fmt.Sprintf("args.name: at most %d bytes", maxSearchPattern)
	case len(sa.Content) > maxSearchPattern:
		return v, fmt.Sprintf("args.content: at most %d bytes", maxSearchPattern)
	case sa.MaxResults != nil && (*sa.MaxResults < 1 || *sa.MaxResults > MaxSearchResults):
		return v, fmt.Sprintf("args.max_results: from 1 to %d", MaxSearchResults)
	}
	if sa.MaxResults != nil {
		v.MaxResults = *sa.MaxResults
	}
	if sa.Name != "" {
		v.name = strings.Split(strings.Trim(sa.Name, "/"), "/")
		for _, seg := range v.name {
			if _, err := path.Match(seg, ""); err != nil || seg == "" {
				return v, "args.name: not a glob (" + sa.Name + ")"
			}
		}
	}
	if sa.Content != "" {
		re, err := regexp.Compile(sa.Content)
		if err != nil {
			return v, "args.content: not an RE2 regular expression: " + strings.TrimPrefix(err.Error(), "error parsing regexp: ")
		}
		v.content = re
		if p, err := syntax.Parse(sa.Content, syntax.Perl); err == nil {
			lineAnchors(p)
			if w, err := regexp.Compile(p.String()); err == nil {
				v.whole = w
			}
		}
	}
	return v, ""
}

// opSearch finds names by glob and lines by RE2 beneath a directory: args
// {"path", "name"?, "content"?, "max_results"?}. The walk (the daemon's)
// opens each directory beneath the one the call resolved with openat2,
// one name at a time, never following a symlink, and skips every name
// NeverMatchResolved hides, with all beneath it: a hidden name, and a
// hidden file's bytes, are never read into a result.
var opSearch = Op{
	Name:     api.OpSearch,
	Hints:    api.ToolHints{ReadOnly: true, Idempotent: true},
	Keys:     []string{"roots"},
	Targets:  pathTarget(ResolveExisting, func(a *SearchArgs) *string { return a.Path }),
	when:     whenPaths,
	validate: []validator{validateRoots},
	decode: func(t *Tool, raw []byte, a *Args) error {
		var sa api.SearchArgs
		if err := strictArgs(raw, &sa); err != nil {
			return err
		}
		a.Value, a.Invalid = searchArgs(&sa)
		a.Record = RecordArgs(mustJSON(sa))
		return nil
	},
	fromRecord: func(t *Tool, rec []byte, a *Args) bool {
		var sa api.SearchArgs
		if json.Unmarshal(rec, &sa) != nil {
			return false
		}
		a.Value, _ = searchArgs(&sa)
		return true
	},
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		sa, ok := argsOf[SearchArgs](req)
		if !ok {
			return deny(api.ReasonInternalError, ix.key)
		}
		return decidePath(ix, sa.Path, req.target(0), func(kind api.Kind, rootKey string) Decision {
			switch kind {
			case KindDir, KindFile:
				return allow(rootKey)
			}
			return deny(api.ReasonUnsupportedFileType, rootKey)
		})
	},
	schema: pathSchema(map[string]any{
		"name":        map[string]any{"type": "string", "description": `Glob on names: "*.go" matches base names; with "/" the path below path, "**" any directories ("src/**/*_test.go").`},
		"content":     map[string]any{"type": "string", "description": "RE2 regular expression matched against each line of regular files; the result gives matching lines with their numbers."},
		"max_results": map[string]any{"type": "integer", "minimum": 1, "maximum": MaxSearchResults, "description": fmt.Sprintf("Most matches returned (default %d).", DefaultSearchResults)},
	}),
	show: func(t *Tool, a OpArgs, ch *api.ApprovalChange) {
		if sa, ok := a.(*SearchArgs); ok {
			showPath(ch, sa.Path, "")
			if sa.Name != "" {
				ch.Summary = append(ch.Summary, api.ChangeField{Label: "name", Value: sa.Name})
			}
			if sa.Content != "" {
				ch.Summary = append(ch.Summary, api.ChangeField{Label: "content", Value: sa.Content})
			}
		}
	},
	describe: func(t *Tool) string {
		return fmt.Sprintf("Search beneath %s for names by glob and lines by RE2 regular expression: matching paths, and lines with their numbers (up to %d bytes).", strings.Join(t.Roots, ", "), t.EffectiveMaxBytes())
	},
}
