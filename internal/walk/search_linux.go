//go:build linux

package walk

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"regexp/syntax"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/jsonenc"
)

// binarySniff is how much of a file is looked at for a NUL byte, as git
// and grep do: a file with one is binary and not searched.
const binarySniff = 8 << 10

// keepBuf: a worker keeps a read buffer up to this size between files.
const keepBuf = 1 << 20

// Search walks dir (an open directory fd, O_PATH or not, that the caller
// resolved beneath its root) for q. Without q.Content, every shown entry
// whose name q.Name matches is a {"path","type"} line; with it, every
// line of a shown regular file (whose name matched, when q.Name is set)
// that q.Content matches is a {"path","line","text"} line. Binary files,
// files on another mount and (with RefuseHardLinks) files with more than
// one link are not read. A canceled ctx returns what was found with
// Truncated set and ctx's error.
func Search(ctx context.Context, dir *os.File, q Query, o Options) (*Result, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	if q.Name == nil && q.Content == nil {
		return nil, ErrNoQuery
	}
	w := newWalker(ctx, o)
	w.maxDepth, w.depthCuts = o.MaxDepth, true
	root, err := w.start(dir)
	if err != nil {
		return nil, err
	}
	if q.Content == nil {
		line := make([]byte, 0, 256)
		w.visit = func(d *dirRef, rel, name string, k kind, st *unix.Stat_t) {
			if !q.Name(name) {
				return
			}
			line = append(line[:0], `{"path":`...)
			line = jsonenc.AppendString(line, rel)
			line = append(line, `,"type":"`...)
			line = append(line, kindNames[k]...)
			line = append(line, "\"}\n"...)
			w.emitNow(line)
		}
		w.walkDir(root, "", 1)
		root.release()
		return w.result()
	}
	if err := w.searchContent(root, q); err != nil {
		return nil, err
	}
	return w.result()
}

// fileJob is one file to search; the collector emits jobs' records in
// the order the walk found the files.
type fileJob struct {
	dir       *dirRef
	name, rel string
	done      chan struct{}
	out       []byte // records, whole lines
	lens      []int  // each record's length in out
	// before is what the walk counted up to this file; t what reading
	// it counted and marked.
	before, t tally
}

// searchContent runs the walk in this goroutine, the file reads on a
// bounded pool and the in-order emission in a collector. The window of
// jobs in flight bounds memory and the directory fds they hold.
func (w *walker) searchContent(root *dirRef, q Query) error {
	workers := w.o.Workers
	if workers <= 0 {
		workers = min(runtime.GOMAXPROCS(0), 8)
	}
	m := newMatcher(q.Content)
	// /proc/self/fd, held for the walk: each re-open of a file's O_PATH
	// fd is then one lookup of its number, not of four components.
	procFD, err := unix.Open("/proc/self/fd", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		root.release()
		return &os.PathError{Op: "walk: open", Path: "/proc/self/fd", Err: err}
	}
	defer unix.Close(procFD)
	w.procFD = procFD
	jobs := make(chan *fileJob, workers)
	order := make(chan *fileJob, workers*16)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for j := range jobs {
				switch {
				case w.full.Load():
					// past the cut: never emitted
				case w.ctx.Err() != nil:
					j.t.limit(LimitCanceled)
				default:
					w.searchFile(j, m, &buf)
				}
				j.dir.release()
				j.dir = nil
				close(j.done)
			}
		}()
	}
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for j := range order {
			<-j.done
			w.apply(&j.before)
			w.apply(&j.t)
			if slices.Contains(j.t.limits, LimitCanceled) {
				w.full.Store(true)
				w.halt.Store(true)
			}
			if w.full.Load() {
				continue
			}
			off := 0
			for _, n := range j.lens {
				if !w.fits(n) {
					break
				}
				off += n
			}
			w.emitPart(j.out[:off])
		}
	}()
	w.visit = func(d *dirRef, rel, name string, k kind, st *unix.Stat_t) {
		if k != kFile || (q.Name != nil && !q.Name(name)) {
			return
		}
		d.acquire()
		j := &fileJob{dir: d, name: name, rel: rel, done: make(chan struct{}), before: w.take()}
		order <- j
		jobs <- j
	}
	// Deferred, so that the pool and the collector end even if a
	// caller's Skip or Name panics.
	defer func() {
		root.release()
		close(jobs)
		close(order)
		wg.Wait()
		<-collected
	}()
	w.walkDir(root, "", 1)
	return nil
}

// searchFile opens j beneath its directory O_PATH, reads it only if it is
// a regular file (through /proc/self/fd: the same inode, so a FIFO or
// device swapped in is never opened for reading) and matches its lines.
func (w *walker) searchFile(j *fileJob, m *matcher, bufp *[]byte) {
	pfd, err := w.openAt(j.dir, j.name, unix.O_PATH)
	if err != nil {
		j.t.countOpenErr(err)
		return
	}
	defer unix.Close(pfd)
	if testHookOpen != nil {
		testHookOpen(pfd)
	}
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		j.t.s.Errors++
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		j.t.s.Changed++ // listed as a file, now a link, FIFO, ...
		return
	}
	if w.o.RefuseHardLinks && st.Nlink > 1 {
		j.t.s.HardLinked++
		return
	}
	fd, err := unix.Openat(w.procFD, strconv.Itoa(pfd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		j.t.s.Errors++
		return
	}
	defer unix.Close(fd)
	if testHookOpen != nil {
		testHookOpen(fd)
	}
	data, cut, err := readBounded(fd, st.Size, w.o.MaxFileBytes, bufp)
	if err != nil {
		j.t.s.Errors++
		return
	}
	j.t.s.FilesRead++
	if bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0 {
		j.t.s.Binary++
		return
	}
	if cut {
		j.t.limit(LimitFileBytes)
	}
	if w.o.Content != nil {
		data = w.o.Content(data)
	}
	var prefix []byte // {"path":"…","line":
	m.lines(data, func(n int, text []byte) bool {
		if prefix == nil {
			prefix = jsonenc.AppendString([]byte(`{"path":`), j.rel)
			prefix = append(prefix, `,"line":`...)
		}
		start := len(j.out)
		j.out = append(j.out, prefix...)
		j.out = strconv.AppendInt(j.out, int64(n), 10)
		j.out = append(j.out, `,"text":`...)
		textCut := false
		if len(text) > w.o.MaxLineBytes {
			i := w.o.MaxLineBytes
			for i > 0 && !utf8.RuneStart(text[i]) {
				i--
			}
			text, textCut = text[:i], true
		}
		j.out = jsonenc.AppendString(j.out, string(text))
		if textCut {
			j.out = append(j.out, `,"cut":true`...)
		}
		j.out = append(j.out, "}\n"...)
		j.lens = append(j.lens, len(j.out)-start)
		// The collector cuts at these caps anyway: one record past either
		// is all it needs to see that there was more.
		return len(j.lens) <= w.o.MaxResults && int64(len(j.out)) <= w.o.MaxBytes
	})
	if len(*bufp) > keepBuf {
		*bufp = nil
	}
}

// readBounded reads fd to its end or to limit+1 bytes, whichever comes
// first, into *bufp (reused across files); cut says the file had more
// than limit bytes (data is then its first limit).
func readBounded(fd int, size, limit int64, bufp *[]byte) (data []byte, cut bool, err error) {
	want := int(min(max(size, 0), limit) + 1)
	buf := *bufp
	if cap(buf) < want {
		buf = make([]byte, max(want, 16<<10))
	}
	buf = buf[:cap(buf)]
	n := 0
	for {
		if n == len(buf) {
			if int64(n) > limit {
				break
			}
			// The file grew since fstat: read on, to limit+1.
			grown := make([]byte, int(min(int64(2*len(buf)), limit+1)))
			copy(grown, buf[:n])
			buf = grown
		}
		r, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			*bufp = buf
			return nil, false, err
		}
		if r == 0 {
			break
		}
		n += r
	}
	*bufp = buf
	if int64(n) > limit {
		return buf[:limit], true, nil
	}
	return buf[:n], false, nil
}

// matcher finds the lines of a file a pattern matches, each line matched
// on its own (without its newline), numbered from 1.
type matcher struct {
	re *regexp.Regexp
	// whole: matching the whole buffer finds every line that matches
	// (the pattern has no ^ $ \A \z, which mean something else in a
	// buffer than in a line), so the search can jump from one match to
	// the next instead of running the pattern on every line.
	whole bool
}

func newMatcher(re *regexp.Regexp) *matcher {
	return &matcher{re: re, whole: !hasAnchor(re)}
}

// hasAnchor reports whether re's pattern asserts a line or text edge;
// when the pattern cannot be parsed again, it says true (the slow, sure
// path).
func hasAnchor(re *regexp.Regexp) bool {
	t, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return true
	}
	var walk func(*syntax.Regexp) bool
	walk = func(r *syntax.Regexp) bool {
		switch r.Op {
		case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText:
			return true
		}
		for _, s := range r.Sub {
			if walk(s) {
				return true
			}
		}
		return false
	}
	return walk(t)
}

// lines calls fn for each matching line, in order, until fn says stop.
//
// With m.whole the buffer is searched from off for the leftmost match;
// no line before the one it starts in can match (Go's regexp finds the
// leftmost match, and a match within a line is a match within the
// buffer: the text around a line is a newline or the buffer's edge,
// non-word either way, so \b and \B agree), that line is matched on its
// own, and the search goes on from the next line. Line numbers are
// counted only up to the lines that match.
func (m *matcher) lines(buf []byte, fn func(n int, line []byte) bool) {
	if !m.whole {
		n := 0
		for off := 0; off < len(buf); n++ {
			end := bytes.IndexByte(buf[off:], '\n')
			if end < 0 {
				end = len(buf)
			} else {
				end += off
			}
			if m.re.Match(buf[off:end]) && !fn(n+1, buf[off:end]) {
				return
			}
			off = end + 1
		}
		return
	}
	lineNo, counted := 1, 0 // lineNo is the number of the line starting at counted
	for off := 0; off < len(buf); {
		loc := m.re.FindIndex(buf[off:])
		if loc == nil {
			return
		}
		at := off + loc[0]
		ls := off
		if i := bytes.LastIndexByte(buf[off:at], '\n'); i >= 0 {
			ls = off + i + 1
		}
		le := len(buf)
		if i := bytes.IndexByte(buf[at:], '\n'); i >= 0 {
			le = at + i
		}
		if ls == len(buf) {
			return // an empty match after the last newline: no line there
		}
		lineNo += bytes.Count(buf[counted:ls], []byte{'\n'})
		counted = ls
		// A match that lies within the line is a match of the line
		// alone (its edges look the same: see above); one that spans a
		// newline says nothing of the line, which is matched on its own.
		if (off+loc[1] <= le || m.re.Match(buf[ls:le])) && !fn(lineNo, buf[ls:le]) {
			return
		}
		off = le + 1
	}
}
