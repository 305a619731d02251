package egress

import (
	"bytes"
	"io"
	"strings"
)

// A scrubber replaces every exact occurrence of a credential's value in
// what a server sent back with CredentialMark (docs/security.md,
// "Credentials the agent never holds"): a server that echoes the
// Authorization header it was sent (httpbin's /headers, a debug page, an
// error that quotes the request) must not hand the value to the agent.
// It matches bytes exactly, nothing more: an upstream that holds the
// value can always send it back encoded. It is kept small and free of
// the rest of egress so that it can be folded into a general redaction
// package.

// CredentialMark replaces a credential's value wherever it is echoed.
const CredentialMark = "[REDACTED:credential]"

// scrubber holds the byte strings to replace, longest first, so that at
// one position the longest one wins ("Bearer tok…" over "tok…").
type scrubber struct {
	needles [][]byte
	longest int
}

func newScrubber(needles []string) *scrubber {
	s := &scrubber{}
	for _, n := range needles {
		if n == "" {
			continue
		}
		s.needles = append(s.needles, []byte(n))
		s.longest = max(s.longest, len(n))
	}
	// Longest first; equal lengths keep their order (stable enough: equal
	// needles at one position are the same bytes).
	for i := 1; i < len(s.needles); i++ {
		for j := i; j > 0 && len(s.needles[j]) > len(s.needles[j-1]); j-- {
			s.needles[j], s.needles[j-1] = s.needles[j-1], s.needles[j]
		}
	}
	return s
}

// scan appends to out what in holds with every needle replaced, up to
// the point where a needle might still begin (unless final: then all of
// in), and returns the rest: at most longest-1 bytes, which the next
// read completes. n counts the replacements.
func (s *scrubber) scan(out, in []byte, final bool, n *int) (outNew, rest []byte) {
	// Every position up to limit can hold a whole needle; one past it
	// cannot be decided until more bytes come.
	limit := len(in) - s.longest
	if final {
		limit = len(in)
	}
	pos := 0
	for pos <= limit && pos < len(in) {
		at, which := -1, -1
		for i, nd := range s.needles {
			j := bytes.Index(in[pos:], nd)
			if j < 0 || pos+j > limit {
				continue
			}
			if at < 0 || pos+j < at {
				at, which = pos+j, i
			}
		}
		if at < 0 {
			break
		}
		out = append(out, in[pos:at]...)
		out = append(out, CredentialMark...)
		*n++
		pos = at + len(s.needles[which])
	}
	cut := max(limit+1, pos)
	if cut > len(in) {
		cut = len(in)
	}
	out = append(out, in[pos:cut]...)
	return out, in[cut:]
}

// String is s with every needle replaced, and how many were.
func (s *scrubber) String(str string) (string, int) {
	if s == nil || len(s.needles) == 0 {
		return str, 0
	}
	n := 0
	for _, nd := range s.needles {
		if strings.Contains(str, string(nd)) {
			out, _ := s.scan(nil, []byte(str), true, &n)
			return string(out), n
		}
	}
	return str, 0
}

// Contains reports whether str holds a needle.
func (s *scrubber) Contains(str string) bool {
	_, n := s.String(str)
	return n > 0
}

// scrubReader is r with every needle replaced, streaming: a needle split
// across two reads is still caught, since the last longest-1 bytes of
// each read are held back until the next one says whether they begin
// one. Memory is one read's buffer and that tail.
type scrubReader struct {
	s     *scrubber
	r     io.ReadCloser
	buf   []byte // read from r
	held  []byte // not yet decided
	out   []byte // decided, not yet returned
	err   error  // r's error, returned once out is drained
	count *int   // replacements, for the result
}

func (s *scrubber) reader(r io.ReadCloser, count *int) io.ReadCloser {
	return &scrubReader{s: s, r: r, buf: make([]byte, 32<<10), count: count}
}

func (z *scrubReader) Read(p []byte) (int, error) {
	for len(z.out) == 0 {
		if z.err != nil {
			return 0, z.err
		}
		n, err := z.r.Read(z.buf)
		z.held = append(z.held, z.buf[:n]...)
		var rest []byte
		z.out, rest = z.s.scan(z.out[:0], z.held, err == io.EOF, z.count)
		// rest is held's tail: move it to the front (copy is memmove).
		z.held = z.held[:copy(z.held, rest)]
		if err != nil && err != io.EOF {
			// A body cut short is no result (readBody drops it): what is
			// held back, perhaps the start of a value, is never returned.
			z.held, z.out = nil, nil
		}
		z.err = err
	}
	n := copy(p, z.out)
	z.out = z.out[n:]
	return n, nil
}

func (z *scrubReader) Close() error { return z.r.Close() }
