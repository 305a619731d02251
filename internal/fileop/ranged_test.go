//go:build linux

package fileop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestReadRange(t *testing.T) {
	type want struct {
		data         string
		first, lines int64
		truncated    bool
		next         int64
		lineCut      bool
	}
	for _, c := range []struct {
		name    string
		content string
		rg      Range
		want    want
	}{
		{"whole", "a\nb\nc\n", Range{MaxBytes: 100}, want{"a\nb\nc\n", 1, 3, false, 0, false}},
		{"empty file", "", Range{MaxBytes: 100}, want{"", 0, 0, false, 0, false}},
		{"empty file tail", "", Range{Tail: 3, MaxBytes: 100}, want{"", 0, 0, false, 0, false}},
		{"offset 0 is line 1", "a\nb\n", Range{Offset: 0, Limit: 1, MaxBytes: 100}, want{"a\n", 1, 1, true, 2, false}},
		{"offset and limit", "a\nb\nc\nd\n", Range{Offset: 2, Limit: 2, MaxBytes: 100}, want{"b\nc\n", 2, 2, true, 4, false}},
		{"limit reaching the end is not a cut", "a\nb\n", Range{Offset: 2, Limit: 1, MaxBytes: 100}, want{"b\n", 2, 1, false, 0, false}},
		{"limit past the end", "a\nb\n", Range{Limit: 5, MaxBytes: 100}, want{"a\nb\n", 1, 2, false, 0, false}},
		{"offset past the end", "a\nb\n", Range{Offset: 3, MaxBytes: 100}, want{"", 0, 0, false, 0, false}},
		{"offset far past the end", "a\nb", Range{Offset: 99, Limit: 2, MaxBytes: 100}, want{"", 0, 0, false, 0, false}},
		{"no trailing newline", "a\nb", Range{Offset: 2, MaxBytes: 100}, want{"b", 2, 1, false, 0, false}},
		{"no trailing newline, limit at the end", "a\nb", Range{Limit: 2, MaxBytes: 100}, want{"a\nb", 1, 2, false, 0, false}},
		{"crlf kept", "a\r\nb\r\nc\r\n", Range{Offset: 2, Limit: 1, MaxBytes: 100}, want{"b\r\n", 2, 1, true, 3, false}},
		{"empty lines count", "\n\n\nx\n", Range{Offset: 3, MaxBytes: 100}, want{"\nx\n", 3, 2, false, 0, false}},
		{"max_bytes cuts at a line boundary", "aa\nbb\ncc\n", Range{MaxBytes: 7}, want{"aa\nbb\n", 1, 2, true, 3, false}},
		{"max_bytes exactly fits", "aa\nbb\n", Range{MaxBytes: 6}, want{"aa\nbb\n", 1, 2, false, 0, false}},
		{"max_bytes before limit", "aa\nbb\ncc\n", Range{Offset: 2, Limit: 2, MaxBytes: 4}, want{"bb\n", 2, 1, true, 3, false}},
		{"a first line longer than max_bytes", "abcdef\nxy\n", Range{MaxBytes: 4}, want{"abcd", 1, 1, true, 2, true}},
		{"a last line longer than max_bytes", "abcdef", Range{MaxBytes: 4}, want{"abcd", 1, 1, true, 0, true}},
		{"a long line cut before a split rune", "aé\n", Range{MaxBytes: 2}, want{"a", 1, 1, true, 0, true}},
		{"tail", "a\nb\nc\n", Range{Tail: 2, MaxBytes: 100}, want{"b\nc\n", 0, 2, false, 0, false}},
		{"tail no trailing newline", "a\nb\nc", Range{Tail: 2, MaxBytes: 100}, want{"b\nc", 0, 2, false, 0, false}},
		{"tail more than the file", "a\nb\n", Range{Tail: 9, MaxBytes: 100}, want{"a\nb\n", 0, 2, false, 0, false}},
		{"tail crlf", "a\r\nb\r\n", Range{Tail: 1, MaxBytes: 100}, want{"b\r\n", 0, 1, false, 0, false}},
		{"tail of empty lines", "x\n\n\n", Range{Tail: 2, MaxBytes: 100}, want{"\n\n", 0, 2, false, 0, false}},
		{"tail cut by max_bytes keeps whole last lines", "aa\nbb\ncc\n", Range{Tail: 3, MaxBytes: 7}, want{"bb\ncc\n", 0, 2, true, 0, false}},
		{"tail window on a line boundary", "aa\nbb\ncc\n", Range{Tail: 3, MaxBytes: 6}, want{"bb\ncc\n", 0, 2, true, 0, false}},
		{"tail of one long line", "abcdef\n", Range{Tail: 1, MaxBytes: 3}, want{"ef\n", 0, 1, true, 0, true}},
		{"tail long line no newline", "xyz\nabcdef", Range{Tail: 1, MaxBytes: 4}, want{"cdef", 0, 1, true, 0, true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReadRange(context.Background(), strings.NewReader(c.content), int64(len(c.content)), c.rg)
			w := c.want
			if err != nil || string(got.Data) != w.data || got.FirstLine != w.first || got.Lines != w.lines ||
				got.Truncated != w.truncated || got.NextOffset != w.next || got.LineCut != w.lineCut || got.Size != int64(len(c.content)) {
				t.Fatalf("ReadRange(%q, %+v) = %+v (%q), %v; want %+v", c.content, c.rg, got, got.Data, err, w)
			}
		})
	}
	for _, rg := range []Range{{Tail: 1, Offset: 1, MaxBytes: 1}, {Tail: 1, Limit: 1, MaxBytes: 1}, {Offset: -1, MaxBytes: 1}, {}, {Limit: 1}} {
		if _, err := ReadRange(context.Background(), strings.NewReader("x"), 1, rg); !errors.Is(err, ErrBadRange) {
			t.Errorf("%+v: %v, want ErrBadRange", rg, err)
		}
	}
}

// refRange is the specification of ReadRange, on lines in memory.
func refRange(content []byte, rg Range) RangeResult {
	res := RangeResult{Size: int64(len(content))}
	var lines [][]byte
	for rest := content; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n') + 1
		if i == 0 {
			i = len(rest)
		}
		lines, rest = append(lines, rest[:i]), rest[i:]
	}
	count := func(d []byte) int64 {
		n := int64(bytes.Count(d, []byte{'\n'}))
		if len(d) > 0 && d[len(d)-1] != '\n' {
			n++
		}
		return n
	}
	if rg.Tail > 0 {
		sel := bytes.Join(lines[max(0, len(lines)-int(rg.Tail)):], nil)
		if int64(len(sel)) <= rg.MaxBytes {
			res.Data = sel
		} else {
			res.Truncated = true
			w := sel[int64(len(sel))-rg.MaxBytes:]
			before := content[int64(len(content))-rg.MaxBytes-1]
			if i := bytes.IndexByte(w[:len(w)-1], '\n'); before == '\n' {
				res.Data = w
			} else if i >= 0 {
				res.Data = w[i+1:]
			} else {
				for len(w) > 1 && !utf8.RuneStart(w[0]) && len(res.Data) == 0 && int64(len(w)) > rg.MaxBytes-3 {
					w = w[1:]
				}
				res.Data, res.LineCut = w, true
			}
		}
		res.Lines = count(res.Data)
		return res
	}
	first := max(rg.Offset, 1)
	if first > int64(len(lines)) {
		return res
	}
	end := int64(len(lines))
	if rg.Limit > 0 {
		end = min(end, first-1+rg.Limit)
	}
	var out []byte
	for i := first - 1; i < end; i++ {
		if int64(len(out)+len(lines[i])) > rg.MaxBytes {
			res.Truncated = true
			if len(out) > 0 {
				res.NextOffset = i + 1
			} else {
				out = lines[i][:runeCut(lines[i], int(rg.MaxBytes))]
				res.LineCut = true
				if i+1 < int64(len(lines)) {
					res.NextOffset = i + 2
				}
			}
			break
		}
		out = append(out, lines[i]...)
	}
	if !res.Truncated && end < int64(len(lines)) {
		res.Truncated, res.NextOffset = true, end+1
	}
	res.Data, res.Lines, res.FirstLine = out, count(out), first
	if res.Lines == 0 {
		res.FirstLine = 0
	}
	return res
}

// TestReadRangeMatchesSpec: random files and ranges, with blocks small
// enough that lines and windows cross block boundaries, against refRange.
func TestReadRangeMatchesSpec(t *testing.T) {
	defer func(b int) { rangeBlock = b }(rangeBlock)
	rangeBlock = 16
	r := rand.New(rand.NewPCG(3, 4))
	pieces := []string{"a", "bc", "\n", "\r\n", "é", "long-line-text-", "\n\n"}
	for i := range 20000 {
		var b strings.Builder
		for range r.IntN(40) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		content := []byte(b.String())
		rg := Range{MaxBytes: 1 + r.Int64N(60)}
		if r.IntN(3) == 0 {
			rg.Tail = 1 + r.Int64N(8)
		} else {
			rg.Offset, rg.Limit = r.Int64N(10), r.Int64N(6)
		}
		got, err := ReadRange(context.Background(), bytes.NewReader(content), int64(len(content)), rg)
		want := refRange(content, rg)
		if err != nil || !bytes.Equal(got.Data, want.Data) || fmt.Sprint(got.Size, got.FirstLine, got.Lines, got.Truncated, got.NextOffset, got.LineCut) !=
			fmt.Sprint(want.Size, want.FirstLine, want.Lines, want.Truncated, want.NextOffset, want.LineCut) {
			t.Fatalf("case %d: ReadRange(%q, %+v)\n got %+v %q, %v\nwant %+v %q", i, content, rg, got, got.Data, err, want, want.Data)
		}
	}
}

// countingReader is a large synthetic file ("line N\n" repeated) that
// counts the bytes read from it.
type countingReader struct {
	size int64
	read int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= c.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), c.size-off)
	for i := range n {
		if (off+i)%8 == 7 {
			p[i] = '\n'
		} else {
			p[i] = 'x'
		}
	}
	c.read += n
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// TestReadRangeTailReadsLittle: a tail of a 1 GiB file reads a block, not
// the file; a tail cut by max_bytes reads at most max_bytes+1.
func TestReadRangeTailReadsLittle(t *testing.T) {
	f := &countingReader{size: 1 << 30}
	got, err := ReadRange(context.Background(), f, f.size, Range{Tail: 3, MaxBytes: 1 << 20})
	if err != nil || string(got.Data) != "xxxxxxx\nxxxxxxx\nxxxxxxx\n" || got.Truncated || f.read > int64(rangeBlock) {
		t.Fatalf("tail = %+v, %v; read %d bytes", got, err, f.read)
	}
	f.read = 0
	got, err = ReadRange(context.Background(), f, f.size, Range{Tail: 1 << 30, MaxBytes: 100})
	if err != nil || len(got.Data) != 96 || !got.Truncated || f.read > 101 {
		t.Fatalf("tail cut = %d bytes, %+v, %v; read %d bytes", len(got.Data), got.Truncated, err, f.read)
	}
	// Forward with a small limit reads a buffer, not the file.
	f.read = 0
	got, err = ReadRange(context.Background(), f, f.size, Range{Offset: 2, Limit: 2, MaxBytes: 100})
	if err != nil || string(got.Data) != "xxxxxxx\nxxxxxxx\n" || got.NextOffset != 4 || f.read > int64(rangeBlock) {
		t.Fatalf("forward = %+v, %v; read %d bytes", got, err, f.read)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ReadRange(ctx, f, f.size, Range{Offset: 1 << 20, MaxBytes: 100}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}
