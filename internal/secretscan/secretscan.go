package secretscan

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"sort"
	"unicode"
)

// MaxSecret is the longest secret guaranteed to be caught wherever the
// writes that carry it are cut. Lines are decided whole, so only a line
// longer than MaxSecret+Step is ever decided in windows, and a secret
// within such a line is caught as long as it is at most MaxSecret bytes.
// A PEM private key is not bounded by it: its block is consumed by a
// state machine from the BEGIN line through the END line.
const MaxSecret = 8 << 10

// Step is how far a window of a long line advances; a Writer holds at
// most MaxSecret+Step bytes back.
const Step = 24 << 10

// window is the most a Writer holds back.
const window = MaxSecret + Step

// Pattern is a manifest's own detector: Regex (RE2 syntax) found within
// a line is replaced by "[REDACTED:Name]".
type Pattern struct {
	Name  string
	Regex string
}

// Marker is what replaces a secret of kind.
func Marker(kind string) string { return "[REDACTED:" + kind + "]" }

// detector is one shape of secret.
type detector struct {
	kind string
	re   *regexp.Regexp
	// group, when > 0, is the submatch replaced: the value of an
	// assignment, its name kept.
	group int
	// word, when set, is what may not touch the secret on either side:
	// "xAKIA…" is not an access key id.
	word *[256]bool
	// prefix, when set, is the literal every match begins with, and
	// anchored the regex anchored at it (see prefixed).
	prefix   []byte
	anchored *regexp.Regexp
	// pem: the match is a PEM BEGIN line; the block after it is consumed
	// by the state machine (pemBody) through its END line.
	pem bool
}

// Scanner is a compiled set of detectors. It is immutable and safe for
// concurrent use; each stream gets its own Writer.
type Scanner struct {
	dets []*detector
	// byPair lists, by a prefix's first two bytes, the detectors with a
	// literal prefix (their indices in dets), which one pass over the
	// text finds (nextPrefixed); the rest (a manifest's patterns) are
	// searched by their regex.
	byPair map[uint16][]int
	pair   [256 * 256 / 64]uint64 // bitset of those first two bytes
	plain  []int
}

// Counts is how many secrets of each kind were replaced.
type Counts map[string]int

// Total is the number of replacements.
func (c Counts) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// Add adds o's counts to c.
func (c Counts) Add(o Counts) {
	for k, v := range o {
		c[k] += v
	}
}

// KindCount is one kind's count, for a record.
type KindCount struct {
	Kind  string
	Count int
}

// Sorted lists c by kind.
func (c Counts) Sorted() []KindCount {
	out := make([]KindCount, 0, len(c))
	for k, v := range c {
		out = append(out, KindCount{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// New compiles a scanner: the built-in detectors when builtin is set,
// then patterns in order. Errors name the pattern by its index.
func New(builtin bool, patterns []Pattern) (*Scanner, error) {
	s := &Scanner{}
	if builtin {
		s.dets = append(s.dets, builtins...)
	}
	for i, p := range patterns {
		d, err := compilePattern(p)
		if err != nil {
			return nil, fmt.Errorf("patterns[%d]: %w", i, err)
		}
		s.dets = append(s.dets, d)
	}
	s.byPair = map[uint16][]int{}
	for i, d := range s.dets {
		if len(d.prefix) < 2 {
			s.plain = append(s.plain, i)
			continue
		}
		k := uint16(d.prefix[0])<<8 | uint16(d.prefix[1])
		s.pair[k/64] |= 1 << (k % 64)
		s.byPair[k] = append(s.byPair[k], i)
	}
	return s, nil
}

// CheckPattern says what is wrong with p, or nil: what New would say of
// it, unnumbered.
func CheckPattern(p Pattern) error {
	_, err := compilePattern(p)
	return err
}

// Empty says the scanner has no detector: redacting with it is the
// identity.
func (s *Scanner) Empty() bool { return s == nil || len(s.dets) == 0 }

// Redact is b with every secret replaced, and the counts by kind: the
// same as writing b to a Writer in any number of pieces.
func (s *Scanner) Redact(b []byte) ([]byte, Counts) {
	out := make(appendWriter, 0, len(b)+64)
	w := s.NewWriter(&out)
	_, _ = w.Write(b)
	_ = w.Flush()
	return out, w.Counts()
}

type appendWriter []byte

func (a *appendWriter) Write(p []byte) (int, error) {
	*a = append(*a, p...)
	return len(p), nil
}

// KindOK says whether name may name a kind: it appears in markers and
// in the ledger, so it is short, lowercase ASCII.
func KindOK(name string) bool {
	if name == "" || len(name) > 32 || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Errors of a user pattern.
var (
	ErrBadName   = errors.New("name must be 1-32 of a-z, 0-9 and _, starting with a letter")
	ErrAnchor    = errors.New("anchors and word boundaries (^ $ \\A \\z \\b \\B) are not allowed: a stream is matched in pieces, so they would depend on where it was cut")
	ErrLineBreak = errors.New("the pattern matches a line break; patterns match within one line")
	ErrEmpty     = errors.New("the pattern matches the empty string")
)

// compilePattern compiles a user pattern to match within one line: its
// character classes and "." lose \n and \r (so "[^x]+" stops at a line
// end, as every built-in detector does), and a literal line break, an
// anchor or a word boundary is refused.
func compilePattern(p Pattern) (*detector, error) {
	if !KindOK(p.Name) {
		return nil, fmt.Errorf("name %q: %w", p.Name, ErrBadName)
	}
	re, err := syntax.Parse(p.Regex, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", p.Regex, err)
	}
	if err := withinLine(re); err != nil {
		return nil, fmt.Errorf("regex %q: %w", p.Regex, err)
	}
	c, err := regexp.Compile(re.String())
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", p.Regex, err)
	}
	if c.MatchString("") {
		return nil, fmt.Errorf("regex %q: %w", p.Regex, ErrEmpty)
	}
	return &detector{kind: p.Name, re: c}, nil
}

// noBreak is every rune but \n and \r, as a syntax char class.
var noBreak = []rune{0, '\n' - 1, '\n' + 1, '\r' - 1, '\r' + 1, unicode.MaxRune}

func withinLine(re *syntax.Regexp) error {
	switch re.Op {
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return ErrAnchor
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if r == '\n' || r == '\r' {
				return ErrLineBreak
			}
		}
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		re.Op, re.Rune = syntax.OpCharClass, append([]rune(nil), noBreak...)
	case syntax.OpCharClass:
		re.Rune = intersect(re.Rune, noBreak)
		if len(re.Rune) == 0 {
			return ErrLineBreak // it matched only line breaks
		}
	}
	for _, sub := range re.Sub {
		if err := withinLine(sub); err != nil {
			return err
		}
	}
	return nil
}

// intersect is the intersection of two sorted range lists (lo, hi pairs).
func intersect(a, b []rune) []rune {
	var out []rune
	for i := 0; i < len(a); i += 2 {
		for j := 0; j < len(b); j += 2 {
			lo, hi := max(a[i], b[j]), min(a[i+1], b[j+1])
			if lo <= hi {
				out = append(out, lo, hi)
			}
		}
	}
	return out
}
