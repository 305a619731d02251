//go:build linux

package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"regexp"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
)

// The daemon's half of search (authz/op_search.go is its pure half): it
// walks beneath the directory handle resolved for the call, opening each
// directory and file from its parent's fd one name at a time with openat2
// (openBeneath: RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so a symlink is never
// followed, nor one swapped in mid-walk), and skips every name the tool's
// never globs hide (authz.NeverMatchResolved, as list does) with all
// beneath it before it is stat'ed or opened: a hidden name, and a hidden
// file's bytes, never reach a result. In a tool that refuses hard links,
// a file with another name (which may be never-listed) is matched by
// name only, its content never read. The output is an api.SearchResults
// document within max_bytes.

// Search bounds.
const (
	// maxSearchScan bounds the entries one search reads, at every depth.
	maxSearchScan = 200_000
	// maxSearchDepth bounds how deep the walk goes (one fd held a level).
	maxSearchDepth = 64
	// searchWhole is the largest file read whole, so that the regex runs
	// once over it (authz.SearchArgs.Prefilter) and a file without a
	// match costs one pass; a larger one is read line by line.
	searchWhole = 8 << 20
	// maxMatchText bounds the text of a matching line a result carries.
	maxMatchText = 512
	// maxLine bounds the line a large file is read in; a longer one is
	// matched in pieces of this size.
	maxLine = 64 << 10
)

func execSearch(c *call, _ func(string, []byte)) *outcome {
	sa, _ := c.areq.Args.(*authz.SearchArgs)
	h, r := c.handle(0), c.decidedBy(0)
	if sa == nil || h == nil || r == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	f, err := h.Open()
	if err != nil {
		return &outcome{reason: c.reasonOf(err, "search")}
	}
	defer f.Close()
	s := searcher{c: c, a: sa, re: sa.Regexp(), whole: sa.Prefilter(), root: r.Root, left: maxSearchScan,
		budget: c.tool.EffectiveMaxBytes() - int64(len(`{"matches":[],"truncated":false}`))}
	if h.Kind == api.KindDir {
		err = s.dir(f, r.Rel, "", 0)
	} else {
		// One file: its name is its path in the result.
		name := path.Base(r.Rel)
		if sa.MatchName(name) {
			err = s.file(f, name)
		}
	}
	if err != nil && !errors.Is(err, errSearchFull) {
		return &outcome{reason: c.reasonOf(err, "search")}
	}
	out, err := json.Marshal(api.SearchResults{Matches: s.matches, Truncated: s.truncated})
	if err != nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	return &outcome{ok: true, reason: api.ReasonAllowed, output: out, truncated: s.truncated}
}

// errSearchFull ends a walk whose results are full.
var errSearchFull = errors.New("search results full")

type searcher struct {
	c       *call
	a       *authz.SearchArgs
	re      *regexp.Regexp
	whole   *regexp.Regexp // re for a whole file; nil: none
	root    int
	left    int
	budget  int64
	matches []api.SearchMatch
	// truncated: more may have matched than the results hold (a cap on
	// results, bytes, entries or depth stopped the walk).
	truncated bool
}

// add appends m, or ends the walk when the results are full.
func (s *searcher) add(m api.SearchMatch) error {
	b, _ := json.Marshal(&m)
	if len(s.matches) >= s.a.MaxResults || s.budget < int64(len(b))+1 {
		s.truncated = true
		return errSearchFull
	}
	s.budget -= int64(len(b)) + 1
	s.matches = append(s.matches, m)
	return nil
}

// dir walks the directory f, at rel beneath the tool's root and at sub
// beneath the searched directory.
func (s *searcher) dir(f *os.File, rel, sub string, depth int) error {
	if err := s.c.ctx.Err(); err != nil {
		return err
	}
	names, err := s.names(f)
	if err != nil {
		return err
	}
	dfd := int(f.Fd())
	for _, name := range names {
		crel, csub := path.Join(rel, name), path.Join(sub, name)
		if authz.NeverMatchResolved(s.c.tool, s.root, crel) {
			continue // hidden: never stat'ed, opened or named
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // gone since it was listed
		}
		nameOK := s.a.MatchName(csub)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if s.re == nil && nameOK {
				if err := s.add(api.SearchMatch{Path: csub}); err != nil {
					return err
				}
			}
			if depth+1 >= maxSearchDepth {
				s.truncated = true
				continue
			}
			if err := s.subdir(dfd, name, crel, csub, depth+1); err != nil {
				return err
			}
		case unix.S_IFREG:
			if !nameOK {
				continue
			}
			if s.re == nil || (s.c.tool.RefusesHardLinks() && st.Nlink > 1) {
				if s.re == nil {
					if err := s.add(api.SearchMatch{Path: csub}); err != nil {
						return err
					}
				}
				continue
			}
			fd, err := openBeneath(dfd, name, unix.O_RDONLY|unix.O_NONBLOCK)
			if err != nil {
				continue // swapped for a symlink, gone, unreadable
			}
			cf := os.NewFile(uintptr(fd), name)
			err = s.file(cf, csub)
			cf.Close()
			if err != nil {
				return err
			}
		default: // symlinks (never followed), FIFOs, sockets, devices: names only
			if s.re == nil && nameOK {
				if err := s.add(api.SearchMatch{Path: csub}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (s *searcher) subdir(dfd int, name, rel, sub string, depth int) error {
	fd, err := openBeneath(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil // swapped for a symlink or a file, gone, unreadable: not descended
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return s.dir(f, rel, sub, depth)
}

// names reads f's names, sorted, within what is left of the scan.
func (s *searcher) names(f *os.File) ([]string, error) {
	names, err := f.Readdirnames(-1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if len(names) > s.left {
		names, s.truncated = names[:s.left], true
	}
	s.left -= len(names)
	slices.Sort(names)
	return names, nil
}

// file searches the regular file f (opened from its parent's fd; it must
// still be a regular file, with one link where the tool refuses more) for
// lines that match, named sub in the results. A file with a NUL byte in
// its first block is binary and skipped, as grep -I skips it.
func (s *searcher) file(f *os.File, sub string) error {
	if s.re == nil {
		return s.add(api.SearchMatch{Path: sub})
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	if s.c.tool.RefusesHardLinks() && st.Nlink > 1 {
		return nil
	}
	if st.Size <= searchWhole {
		data := make([]byte, st.Size)
		n, err := io.ReadFull(f, data)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return nil // unreadable: skipped
		}
		data = data[:n]
		if isBinary(data) || s.whole != nil && !s.whole.Match(data) {
			return nil
		}
		line := 0
		for len(data) > 0 {
			line++
			text := data
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				text, data = data[:i], data[i+1:]
			} else {
				data = nil
			}
			if s.re.Match(text) {
				if err := s.add(api.SearchMatch{Path: sub, Line: line, Text: matchText(text)}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	br := bufio.NewReaderSize(f, maxLine)
	line, first := 1, true
	for {
		if err := s.c.ctx.Err(); err != nil {
			return err
		}
		piece, err := br.ReadSlice('\n')
		if first {
			if isBinary(piece) {
				return nil
			}
			first = false
		}
		if len(piece) > 0 && s.re.Match(bytes.TrimSuffix(piece, []byte{'\n'})) {
			if err := s.add(api.SearchMatch{Path: sub, Line: line, Text: matchText(piece)}); err != nil {
				return err
			}
		}
		switch err {
		case nil:
			line++
		case bufio.ErrBufferFull: // a longer line, matched in pieces
		default:
			return nil
		}
	}
}

// isBinary reports a NUL byte in data's first block.
func isBinary(data []byte) bool {
	return bytes.IndexByte(data[:min(len(data), 8000)], 0) >= 0
}

// matchText is a matching line as a result shows it: without its line
// end, at most maxMatchText bytes cut before a split character.
func matchText(line []byte) string {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) > maxMatchText {
		line = trimToRune(line[:maxMatchText])
	}
	return string(line)
}
