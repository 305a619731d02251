//go:build linux

package fileop

import (
	"bytes"
	"fmt"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/errclass"
)

// Edit is one exact replacement: Old, which must occur exactly once in
// the content as the edits before it left it, becomes New.
type Edit struct {
	Old, New string
}

// ErrEmptyEdit: an edit's Old is empty (it would match everywhere). A
// malformed request, not a failed precondition.
var ErrEmptyEdit = errclass.New(api.ReasonInvalidArgs, "edit with empty old text")

// EditError says which edit did not match exactly once, and how many
// times it matched (0, or 2 and more). It is ErrPrecondition: the file is
// not what the caller's edits were written against (precondition_failed).
type EditError struct {
	Index int // 0-based, in the order given
	Count int // occurrences, overlapping ones counted
}

func (e *EditError) Error() string {
	if e.Count == 0 {
		return fmt.Sprintf("edit %d: old text not found", e.Index)
	}
	return fmt.Sprintf("edit %d: old text occurs %d times, want exactly once", e.Index, e.Count)
}

// Is makes an EditError ErrPrecondition.
func (e *EditError) Is(target error) bool { return target == ErrPrecondition }

// Reason is ErrPrecondition's: the file is not as the edits expect.
func (e *EditError) Reason() api.Reason { return api.ReasonPreconditionFailed }

// ApplyEdits applies edits to content in order and returns the new
// content; content is not modified. Each Old must occur exactly once in
// the content as the previous edits left it, counting overlapping
// occurrences ("aa" occurs twice in "aaa": which one is meant is
// ambiguous), else a *EditError naming the edit and the count; an empty
// Old is ErrEmptyEdit. Matching is on bytes: no normalization of line
// endings, case or Unicode, so what matched is exactly what the caller
// quoted. Nothing is applied unless every edit is.
func ApplyEdits(content []byte, edits []Edit) ([]byte, error) {
	for i, e := range edits {
		if e.Old == "" {
			return nil, fmt.Errorf("edit %d: %w", i, ErrEmptyEdit)
		}
	}
	cur := content
	for i, e := range edits {
		at, n := findOnce(cur, []byte(e.Old))
		if n != 1 {
			return nil, &EditError{Index: i, Count: n}
		}
		next := make([]byte, 0, len(cur)-len(e.Old)+len(e.New))
		next = append(next, cur[:at]...)
		next = append(next, e.New...)
		next = append(next, cur[at+len(e.Old):]...)
		cur = next
	}
	if len(edits) == 0 {
		return bytes.Clone(content), nil
	}
	return cur, nil
}

// findOnce returns the first index of old in s and how many times old
// occurs, overlapping occurrences counted.
func findOnce(s, old []byte) (first, count int) {
	first = bytes.Index(s, old)
	if first < 0 {
		return -1, 0
	}
	count = 1
	for from := first + 1; from < len(s); {
		i := bytes.Index(s[from:], old)
		if i < 0 {
			break
		}
		count++
		from += i + 1
	}
	return first, count
}
