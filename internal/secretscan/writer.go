package secretscan

import (
	"bytes"
	"io"
)

// Writer redacts a stream: what is written to it reaches dst with every
// secret replaced, in order, as soon as it is decided. It holds back the
// current line (bytes after the last \n or \r), and of a line longer than
// MaxSecret+Step only that much: a secret split across writes is caught,
// and memory is bounded however long the stream. Flush decides what is
// held at the stream's end. The output never depends on how the input
// was cut into writes.
//
// A Writer is not safe for concurrent use.
type Writer struct {
	s   *Scanner
	dst io.Writer
	// pend is the input not yet decided (at most window bytes).
	pend []byte
	// last is the last byte decided: what precedes pend, for the word
	// checks. 0 at the start (a boundary).
	last byte
	// inPEM: the stream is inside a PEM block whose BEGIN line was
	// replaced; its body is dropped, its line breaks kept.
	inPEM  bool
	out    []byte
	counts Counts
	next   []found // per detector: its next match in the segment
	err    error
}

// found is a detector's next match in a segment: the whole match
// [s, e) and the replaced span [rs, re); s < 0 when there is none.
type found struct{ s, e, rs, re int }

// NewWriter returns a Writer that writes the redacted stream to dst.
func (s *Scanner) NewWriter(dst io.Writer) *Writer {
	return &Writer{s: s, dst: dst, counts: Counts{}}
}

// Counts is what the stream's replacements were so far, by kind.
func (w *Writer) Counts() Counts { return w.counts }

// Write takes p; it returns len(p) unless dst failed.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.s.Empty() {
		_, w.err = w.dst.Write(p)
		if w.err != nil {
			return 0, w.err
		}
		return len(p), nil
	}
	n := len(p)
	for len(p) > 0 {
		k := min(window-len(w.pend), len(p))
		w.pend = append(w.pend, p[:k]...)
		p = p[k:]
		w.drain(false)
		if w.err != nil {
			return 0, w.err
		}
	}
	return n, nil
}

// Flush decides and writes everything held: the stream has ended. A PEM
// block still open is dropped to the end (an output cut by max_bytes in
// the middle of a key). The Writer may be written to again as a new
// stream.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	w.drain(true)
	w.inPEM, w.last = false, 0
	return w.err
}

func isBreak(c byte) bool { return c == '\n' || c == '\r' }

// drain decides what it can of pend. Lines end at \n or \r, and no
// detector matches across one: complete lines are decided together; a
// line with no end within window bytes is decided in windows of window
// bytes advancing by Step (or past a match that reaches further); what
// is left waits for more input, or for final. Every choice depends on
// the input alone, never on how it came in.
func (w *Writer) drain(final bool) {
	for len(w.pend) > 0 {
		var n int
		brk := max(bytes.LastIndexByte(w.pend, '\n'), bytes.LastIndexByte(w.pend, '\r'))
		switch {
		case brk >= 0:
			n = w.segment(w.pend[:brk+1], brk+1)
		case len(w.pend) >= window:
			n = w.segment(w.pend, Step)
		case final:
			n = w.segment(w.pend, len(w.pend))
		default:
			return
		}
		w.last = w.pend[n-1]
		w.pend = w.pend[:copy(w.pend, w.pend[n:])]
		if len(w.out) > 0 {
			if _, err := w.dst.Write(w.out); err != nil {
				w.err = err
				return
			}
			w.out = w.out[:0]
		}
	}
}

// segment decides seg up to at least limit and returns how far it
// decided; the replaced text goes to w.out. A match is taken when it
// starts before limit (then at least MaxSecret bytes follow it in seg,
// or seg ends at a line break or the stream's end). Of matches at the
// same start the longest wins, then the earliest detector.
func (w *Writer) segment(seg []byte, limit int) int {
	s := w.s
	if cap(w.next) < len(s.plain) {
		w.next = make([]found, len(s.plain))
	}
	next := w.next[:len(s.plain)]
	for i := range next {
		next[i] = found{s: -2} // not searched yet
	}
	pre := found{s: -2}
	preDet := -1
	pos := 0
	for pos < len(seg) {
		if w.inPEM {
			end, closed := pemBody(seg, pos, limit)
			for _, c := range seg[pos:end] {
				if isBreak(c) {
					w.out = append(w.out, c)
				}
			}
			pos = end
			if !closed {
				return pos
			}
			w.inPEM = false
			continue
		}
		if pre.s != -1 && pre.s < pos {
			pre, preDet = w.nextPrefixed(seg, pos)
		}
		best, bestDet := pre, preDet
		for i, di := range s.plain {
			f := &next[i]
			if f.s == -1 {
				continue // none left in seg
			}
			if f.s < pos {
				if *f = w.find(s.dets[di], seg, pos); f.s < 0 {
					continue
				}
			}
			if bestDet < 0 || f.s < best.s || (f.s == best.s && (f.e > best.e || f.e == best.e && di < bestDet)) {
				best, bestDet = *f, di
			}
		}
		if bestDet < 0 || best.s >= limit {
			end := max(pos, limit)
			w.out = append(w.out, seg[pos:end]...)
			return end
		}
		d := s.dets[bestDet]
		w.out = append(w.out, seg[pos:best.rs]...)
		w.out = append(w.out, "[REDACTED:"...)
		w.out = append(w.out, d.kind...)
		w.out = append(w.out, ']')
		w.counts[d.kind]++
		pos = best.re
		w.inPEM = d.pem
	}
	return pos
}

// nextPrefixed is the first match at or after pos of the detectors with
// a literal prefix, found in one pass over seg: a position whose two
// bytes begin some prefix is tried against those detectors (the prefix,
// then the anchored regex, then the word checks).
func (w *Writer) nextPrefixed(seg []byte, pos int) (found, int) {
	s := w.s
	for i := pos; i+1 < len(seg); i++ {
		k := uint16(seg[i])<<8 | uint16(seg[i+1])
		if s.pair[k/64]&(1<<(k%64)) == 0 {
			continue
		}
		best, bestDet := found{s: -1}, -1
		for _, di := range s.byPair[k] {
			d := s.dets[di]
			if !bytes.HasPrefix(seg[i:], d.prefix) {
				continue
			}
			if f, ok := w.matchAt(d, seg, i); ok && (bestDet < 0 || f.e > best.e) {
				best, bestDet = f, di
			}
		}
		if bestDet >= 0 {
			return best, bestDet
		}
	}
	return found{s: -1}, -1
}

// matchAt is d's match beginning at i, if its anchored regex matches
// there and no word byte touches the replaced span.
func (w *Writer) matchAt(d *detector, seg []byte, i int) (found, bool) {
	var f found
	if d.group > 0 {
		m := d.anchored.FindSubmatchIndex(seg[i:])
		if m == nil || m[2*d.group] < 0 {
			return f, false
		}
		f = found{i + m[0], i + m[1], i + m[2*d.group], i + m[2*d.group+1]}
	} else {
		m := d.anchored.FindIndex(seg[i:])
		if m == nil {
			return f, false
		}
		f = found{i + m[0], i + m[1], i + m[0], i + m[1]}
	}
	return f, w.clear(d, seg, f)
}

// clear says no word byte of d touches f's replaced span. A detector
// whose secret is a group of its match (an assignment's value) is
// anchored by the name before it, so only the byte after is checked: the
// "=" of KEY=VALUE is a base64 byte, and checking it refused every
// unquoted env-file assignment.
func (w *Writer) clear(d *detector, seg []byte, f found) bool {
	if d.word == nil {
		return true
	}
	if d.group == 0 && d.word[w.before(seg, f.rs)] {
		return false
	}
	return f.re >= len(seg) || !d.word[seg[f.re]]
}

// find is d's (a pattern without a literal prefix) first match in seg
// at or after pos.
func (w *Writer) find(d *detector, seg []byte, pos int) found {
	for pos < len(seg) {
		m := d.re.FindIndex(seg[pos:])
		if m == nil {
			break
		}
		f := found{pos + m[0], pos + m[1], pos + m[0], pos + m[1]}
		if w.clear(d, seg, f) {
			return f
		}
		pos = f.s + 1
	}
	return found{s: -1}
}

func (w *Writer) before(seg []byte, i int) byte {
	if i > 0 {
		return seg[i-1]
	}
	return w.last
}

// pemBody is how far a PEM block's body runs in seg from pos: to the end
// of its END line (closed), to a byte no body holds (closed, that byte
// not taken), or to limit or seg's end (still open). An END line that
// starts before limit is taken whole: seg holds MaxSecret bytes beyond
// limit, or ends at a line break.
func pemBody(seg []byte, pos, limit int) (int, bool) {
	for i := pos; i < len(seg); i++ {
		if i >= limit {
			return i, false
		}
		c := seg[i]
		if c == '-' && bytes.HasPrefix(seg[i:], endLine) {
			rest := seg[i+len(endLine) : min(len(seg), i+len(endLine)+maxEndLabel)]
			if k := bytes.IndexAny(rest, "\n\r"); k >= 0 {
				rest = rest[:k] // the END line's own dashes, never the next line's
			}
			if j := bytes.Index(rest, dashes); j >= 0 {
				return i + len(endLine) + j + len(dashes), true
			}
		}
		if !pemBodyByte[c] {
			return i, true
		}
	}
	return len(seg), false
}

var (
	endLine = []byte("-----END ")
	dashes  = []byte("-----")
)

// maxEndLabel bounds the label of an END line ("OPENSSH PRIVATE KEY").
const maxEndLabel = 64
