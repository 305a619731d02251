//go:build linux

package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"path"
	"regexp"
	"sync"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/secretscan"
	"github.com/sluicehq/sluice/internal/walk"
)

// The daemon's half of search (authz/op_search.go is its pure half). A
// search of a directory is internal/walk's: it walks beneath the
// directory handle resolved for the call, opening each directory and
// file from its parent's fd one name at a time with openat2
// (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS: a symlink is never followed, nor
// one swapped in mid-walk), reads a file only once fstat of its O_PATH fd
// says it is a regular file (a FIFO or device swapped in is never
// opened), and stays on the directory's mount. Its skip filter is the
// tool's never globs (authz.NeverMatchResolved, as list applies them):
// a hidden name is skipped with all beneath it before it is stat'ed or
// opened, so neither a hidden name nor a hidden file's bytes reach a
// result. In a tool that refuses hard links, a file with another name
// (which may be never-listed) is matched by name only, its content never
// read. The output is an api.SearchResults document within max_bytes.

// searchDocBytes is what the document adds around its matches.
var searchDocBytes = int64(len(`{"matches":[],"truncated":false}`))

func execSearch(c *call, _ func(string, []byte)) *outcome {
	sa, _ := c.areq.Args.(*authz.SearchArgs)
	h, r := c.handle(0), c.decidedBy(0)
	if sa == nil || h == nil || r == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	done, err := c.walkWhereDecided(0)
	if err != nil {
		return &outcome{reason: c.reasonOf(err, "search")}
	}
	defer done()
	s := searchResults{max: sa.MaxResults, budget: c.tool.EffectiveMaxBytes() - searchDocBytes}
	if sc := c.tool.Redactor(); sc != nil {
		s.red = &searchRedaction{s: sc, counts: secretscan.Counts{}}
	}
	if h.Kind == api.KindDir {
		err = searchDir(c, sa, r, &s)
	} else {
		err = searchFile(c, sa, path.Base(r.Rel), &s)
	}
	if err != nil {
		return &outcome{reason: c.reasonOf(err, "search")}
	}
	if s.matches == nil {
		s.matches = []api.SearchMatch{} // "matches": [], never null
	}
	out, err := json.Marshal(api.SearchResults{Matches: s.matches, Truncated: s.truncated})
	if err != nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	o := &outcome{ok: true, reason: api.ReasonAllowed, output: out, truncated: s.truncated}
	if s.red != nil {
		o.redacted = s.red.counts // redacted here: redactOutcome leaves it
	}
	return o
}

// searchResults collects matches within max_results and max_bytes.
type searchResults struct {
	matches   []api.SearchMatch
	max       int
	budget    int64
	truncated bool
	red       *searchRedaction // nil: the tool redacts nothing
}

// add appends m; false when the results are full (truncated).
func (s *searchResults) add(m api.SearchMatch) bool {
	m.Path, m.Text = s.red.text(m.Path), s.red.text(m.Text)
	b, _ := json.Marshal(&m)
	if len(s.matches) >= s.max || s.budget < int64(len(b))+1 {
		s.truncated = true
		return false
	}
	s.budget -= int64(len(b)) + 1
	s.matches = append(s.matches, m)
	return true
}

// searchDir walks the directory dir, resolved at r beneath its root.
func searchDir(c *call, sa *authz.SearchArgs, r *authz.Resource, s *searchResults) error {
	f := c.handle(0).File()
	skip := func(rel, _ string, _ bool) bool {
		return authz.NeverMatchResolved(c.tool, r.Root, path.Join(r.Rel, rel))
	}
	q := walk.Query{Content: sa.Regexp()}
	if sa.Name != "" {
		q.Name = sa.MatchBase
	}
	o := walk.Options{Skip: skip, RefuseHardLinks: c.tool.RefusesHardLinks(), MaxResults: s.max, MaxBytes: s.budget}
	if s.red != nil {
		o.Content = s.red.content
	}
	if sa.PathGlob() {
		// The walk filters by base name; whole paths are matched here,
		// so the walk's own caps must leave room for what this drops.
		o.MaxResults, o.MaxBytes = authz.MaxSearchResults, max(4*s.budget, 1<<20)
	}
	res, err := walk.Search(c.ctx, f, q, o)
	if err != nil {
		return err
	}
	s.truncated = res.Truncated
	for line := range bytes.Lines(res.Out) {
		var m api.SearchMatch
		if err := json.Unmarshal(line, &m); err != nil {
			return err
		}
		if sa.PathGlob() && !sa.MatchName(m.Path) {
			continue
		}
		if !s.add(m) {
			break
		}
	}
	return nil
}

// Search bounds of one file searched by its own path.
const (
	// maxMatchText bounds the text of a matching line a result carries,
	// as the walk bounds it.
	maxMatchText = walk.DefaultMaxLineBytes
)

// searchFile searches the one regular file the call resolved (a search
// whose path names a file), named name in the results, as the walk
// searches each file: at most walk.DefaultMaxFileBytes of it (more is
// truncated), not when binary (a NUL in its first 8 KiB) or, in a tool
// that refuses them, hard-linked.
func searchFile(c *call, sa *authz.SearchArgs, name string, s *searchResults) error {
	if !sa.MatchName(name) {
		return nil
	}
	if sa.Regexp() == nil {
		s.add(api.SearchMatch{Path: name})
		return nil
	}
	data, trunc, _, err := readFile(c.handle(0), walk.DefaultMaxFileBytes, c.tool.RefusesHardLinks())
	switch {
	case errors.Is(err, errHardLinked):
		return nil
	case err != nil:
		return err
	}
	if trunc {
		s.truncated = true
	}
	if bytes.IndexByte(data[:min(len(data), 8<<10)], 0) >= 0 {
		return nil
	}
	if s.red != nil {
		data = s.red.content(data)
	}
	if pre := sa.Prefilter(); pre != nil && !pre.Match(data) {
		return nil
	}
	matchLines(data, sa.Regexp(), func(n int, text []byte) bool {
		if len(text) > maxMatchText {
			text = trimToRune(text[:maxMatchText])
		}
		return s.add(api.SearchMatch{Path: name, Line: n, Text: string(text)})
	})
	return nil
}

// matchLines calls fn with each line of data (without its "\n") that re
// matches, and its number, until fn returns false.
func matchLines(data []byte, re *regexp.Regexp, fn func(int, []byte) bool) {
	n := 0
	for len(data) > 0 {
		n++
		text := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			text, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if re.Match(text) && !fn(n, text) {
			return
		}
	}
}

// searchRedaction is what a search with a redactor matches and returns:
// each file's content redacted before its lines are matched (line breaks
// kept, so numbers stay the file's), and each match's path and text.
type searchRedaction struct {
	s      *secretscan.Scanner
	mu     sync.Mutex
	counts secretscan.Counts
}

func (r *searchRedaction) content(data []byte) []byte {
	out, n := r.s.Redact(data)
	if n.Total() == 0 {
		return data
	}
	r.mu.Lock()
	r.counts.Add(n)
	r.mu.Unlock()
	return out
}

func (r *searchRedaction) text(s string) string {
	if r == nil {
		return s
	}
	return string(r.content([]byte(s)))
}
