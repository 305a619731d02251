//go:build linux

package fileop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Range selects lines of a regular file for a read tool. Lines are
// numbered from 1, as Claude Code's Read numbers them: Offset 1 (or 0,
// the same) starts at the first line. A line ends after "\n" ("\r\n" is
// a line whose content ends in "\r": bytes are returned as they are); a
// last line without "\n" is a line; an empty file has no lines.
type Range struct {
	// Offset is the first line returned (1-based; 0 means 1). An offset
	// past the last line returns no data, and is not an error.
	Offset int64
	// Limit is the most lines returned (0: no line limit).
	Limit int64
	// Tail selects the last Tail lines instead (0: not a tail read). It
	// excludes Offset and Limit.
	Tail int64
	// MaxBytes caps the bytes returned; it must be positive (there is no
	// unbounded read).
	MaxBytes int64
}

// RangeResult is what a ranged read returned.
type RangeResult struct {
	Data []byte
	// Size is the file's size: the reads never look past it.
	Size int64
	// FirstLine is the number of the first line returned (0 when none
	// is, and for a tail read, whose line numbers would take reading the
	// whole file).
	FirstLine int64
	// Lines counts the lines in Data, a partial one included.
	Lines int64
	// Truncated: the selection had more than Data holds. Forward, the
	// file goes on after Data and Limit or MaxBytes stopped the read (a
	// read that stops at the end of the file is not truncated); for a
	// tail read, MaxBytes dropped lines, or the start of a line, from the
	// front of the last Tail lines.
	Truncated bool
	// NextOffset is the line to continue from when a forward read was
	// truncated and lines follow (0 otherwise, and always for a tail).
	NextOffset int64
	// LineCut: a single line was longer than MaxBytes, so Data holds part
	// of it (its first MaxBytes bytes forward, its last for a tail), cut
	// before a UTF-8 sequence where one is split. Forward, NextOffset
	// then skips the rest of that line: a caller that keeps continuing
	// always advances, and reaches the rest only with a larger MaxBytes.
	// Otherwise MaxBytes cuts between lines, never inside one.
	LineCut bool
}

// ErrBadRange: a Range with a negative field, Tail together with Offset
// or Limit, or no positive MaxBytes.
var ErrBadRange = errors.New("invalid line range")

// rangeBlock is the read size: the buffer of a forward read, the block
// of a tail read's backward scan (a variable: tests make it small to
// cross block boundaries; bufio's minimum is 16).
var rangeBlock = 64 << 10

// ReadRange reads the lines rg selects from r, a regular file of size
// bytes (the caller's fstat of the held fd; bytes past it, written since,
// are not read). A forward read streams from the start, keeping at most
// MaxBytes plus one buffer in memory; a tail read scans backwards from
// the end in blocks and reads at most MaxBytes+1 bytes, however large the
// file. It looks at ctx once per block.
func ReadRange(ctx context.Context, r io.ReaderAt, size int64, rg Range) (RangeResult, error) {
	switch {
	case rg.Offset < 0 || rg.Limit < 0 || rg.Tail < 0 || size < 0:
		return RangeResult{}, fmt.Errorf("%w: negative", ErrBadRange)
	case rg.Tail > 0 && (rg.Offset > 0 || rg.Limit > 0):
		return RangeResult{}, fmt.Errorf("%w: tail excludes offset and limit", ErrBadRange)
	case rg.MaxBytes <= 0:
		return RangeResult{}, fmt.Errorf("%w: max_bytes must be positive", ErrBadRange)
	}
	if rg.Tail > 0 {
		return readTail(ctx, r, size, rg)
	}
	return readForward(ctx, r, size, rg)
}

func readForward(ctx context.Context, r io.ReaderAt, size int64, rg Range) (RangeResult, error) {
	res := RangeResult{Size: size}
	first := max(rg.Offset, 1)
	br := bufio.NewReaderSize(io.NewSectionReader(r, 0, size), rangeBlock)
	// Skip to the first line wanted.
	for line := int64(1); line < first; {
		if err := ctx.Err(); err != nil {
			return RangeResult{}, err
		}
		_, err := br.ReadSlice('\n')
		switch err {
		case nil:
			line++
		case bufio.ErrBufferFull: // a long line: keep going
		case io.EOF:
			return res, nil // past the end
		default:
			return RangeResult{}, err
		}
	}
	var out []byte
	lineStart := 0 // where the line being read starts in out
	for rg.Limit == 0 || res.Lines < rg.Limit {
		if err := ctx.Err(); err != nil {
			return RangeResult{}, err
		}
		piece, err := br.ReadSlice('\n')
		if err != nil && err != bufio.ErrBufferFull && err != io.EOF {
			return RangeResult{}, err
		}
		if len(piece) == 0 && err == io.EOF {
			if len(out) > lineStart { // a last line without "\n", read in pieces
				res.Lines++
			}
			break
		}
		if int64(len(out)+len(piece)) > rg.MaxBytes {
			res.Truncated = true
			if res.Lines > 0 || lineStart > 0 {
				// Cut before this line: the caller continues with it.
				out = out[:lineStart]
				res.NextOffset = first + res.Lines
			} else {
				// This first line alone is longer than MaxBytes.
				out = append(out, piece...)
				out = out[:runeCut(out, int(rg.MaxBytes))]
				res.Lines, res.LineCut = 1, true
				more, err := skipLine(ctx, br, err)
				if err != nil {
					return RangeResult{}, err
				}
				if more {
					res.NextOffset = first + 1
				}
			}
			break
		}
		out = append(out, piece...)
		if err == bufio.ErrBufferFull {
			continue // the same line goes on
		}
		res.Lines++
		lineStart = len(out)
		if err == io.EOF {
			break
		}
	}
	if rg.Limit > 0 && res.Lines == rg.Limit && !res.Truncated {
		if _, err := br.Peek(1); err == nil {
			res.Truncated, res.NextOffset = true, first+res.Lines
		}
	}
	if res.Lines > 0 {
		res.FirstLine = first
	}
	res.Data = out
	return res, nil
}

// skipLine reads past the rest of the current line (last is the error of
// the read that ended in it) and reports whether any byte follows.
func skipLine(ctx context.Context, br *bufio.Reader, last error) (bool, error) {
	for last == bufio.ErrBufferFull {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		_, last = br.ReadSlice('\n')
	}
	if last == io.EOF {
		return false, nil
	}
	if last != nil {
		return false, last
	}
	_, err := br.Peek(1)
	return err == nil, nil
}

// runeCut returns n, or a little less so that b[:n] does not end inside
// a UTF-8 sequence (at most 3 bytes back; never down to 0).
func runeCut(b []byte, n int) int {
	for i := 0; i < utf8.UTFMax && n-i > 0 && n-i < len(b); i++ {
		if utf8.RuneStart(b[n-i]) {
			return n - i
		}
	}
	return n
}

func readTail(ctx context.Context, r io.ReaderAt, size int64, rg Range) (RangeResult, error) {
	res := RangeResult{Size: size}
	if size == 0 {
		return res, nil
	}
	// The region read, from the end: at most MaxBytes+1 bytes, the +1
	// telling whether a window of MaxBytes starts at a line boundary.
	budget := min(size, rg.MaxBytes+1)
	var blocks [][]byte // last block first
	pos := size
	start := int64(-1) // where the last Tail lines start
	found := int64(0)
	for pos > size-budget && start < 0 {
		if err := ctx.Err(); err != nil {
			return RangeResult{}, err
		}
		n := min(int64(rangeBlock), pos-(size-budget))
		pos -= n
		b := make([]byte, n)
		switch m, err := r.ReadAt(b, pos); {
		case m < len(b) && (err == nil || err == io.EOF):
			return RangeResult{}, fmt.Errorf("tail: %w: shorter than its size", ErrChanged)
		case m < len(b):
			return RangeResult{}, err
		}
		blocks = append(blocks, b)
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != '\n' || pos+int64(i) == size-1 { // the final "\n" ends the last line
				continue
			}
			if found++; found == rg.Tail {
				start = pos + int64(i) + 1
				break
			}
		}
	}
	if start < 0 && pos == 0 {
		start = 0 // the file has no more than Tail lines
	}
	region := make([]byte, 0, size-pos)
	for i := len(blocks) - 1; i >= 0; i-- {
		region = append(region, blocks[i]...)
	}
	switch {
	case start >= 0 && size-start <= rg.MaxBytes:
		res.Data = region[start-pos:]
	default:
		// The lines wanted are more than MaxBytes: keep the last whole
		// lines that fit, or the end of the last line.
		res.Truncated = true
		w := region[int64(len(region))-rg.MaxBytes:]
		switch i := bytes.IndexByte(w[:len(w)-1], '\n'); {
		case int64(len(region)) > rg.MaxBytes && region[int64(len(region))-rg.MaxBytes-1] == '\n':
			res.Data = w // it starts a line
		case i >= 0:
			res.Data = w[i+1:]
		default:
			cut := 0
			for cut < utf8.UTFMax-1 && cut < len(w)-1 && !utf8.RuneStart(w[cut]) {
				cut++
			}
			res.Data, res.LineCut = w[cut:], true
		}
	}
	res.Lines = int64(bytes.Count(res.Data, []byte{'\n'}))
	if len(res.Data) > 0 && res.Data[len(res.Data)-1] != '\n' {
		res.Lines++
	}
	return res, nil
}
