//go:build linux

package fileop

import (
	"errors"
	"testing"
)

func TestApplyEdits(t *testing.T) {
	for _, c := range []struct {
		name    string
		in      string
		edits   []Edit
		want    string
		errIdx  int // -1: no *EditError
		count   int
		wantErr error
	}{
		{"one", "a b c", []Edit{{"b", "B"}}, "a B c", -1, 0, nil},
		{"none", "abc", nil, "abc", -1, 0, nil},
		{"in order, each on the previous result", "x1", []Edit{{"x1", "y2"}, {"y2", "z3"}}, "z3", -1, 0, nil},
		{"delete text", "keep drop keep", []Edit{{" drop", ""}}, "keep keep", -1, 0, nil},
		{"crlf exact", "a\r\nb\r\n", []Edit{{"a\r\n", "A\r\n"}}, "A\r\nb\r\n", -1, 0, nil},
		{"lf does not match crlf", "a\r\nb", []Edit{{"a\nb", "x"}}, "", 0, 0, ErrPrecondition},
		{"not found", "abc", []Edit{{"z", "y"}}, "", 0, 0, ErrPrecondition},
		{"twice", "ab ab", []Edit{{"ab", "x"}}, "", 0, 2, ErrPrecondition},
		{"overlapping counts", "aaa", []Edit{{"aa", "b"}}, "", 0, 2, ErrPrecondition},
		{"second edit fails on the first's result", "ab", []Edit{{"a", "b"}, {"b", "c"}}, "", 1, 2, ErrPrecondition},
		{"a later edit that no longer matches", "ab", []Edit{{"ab", "cd"}, {"ab", "x"}}, "", 1, 0, ErrPrecondition},
		{"empty old", "abc", []Edit{{"a", "b"}, {"", "x"}}, "", -1, 0, ErrEmptyEdit},
		{"case sensitive", "Abc", []Edit{{"abc", "x"}}, "", 0, 0, ErrPrecondition},
		{"binary bytes", "\x00\xff\x00", []Edit{{"\xff", "\xfe"}}, "\x00\xfe\x00", -1, 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := []byte(c.in)
			got, err := ApplyEdits(in, c.edits)
			if string(in) != c.in {
				t.Fatalf("input modified: %q", in)
			}
			if c.wantErr == nil {
				if err != nil || string(got) != c.want {
					t.Fatalf("ApplyEdits = %q, %v; want %q", got, err, c.want)
				}
				return
			}
			if !errors.Is(err, c.wantErr) || got != nil {
				t.Fatalf("ApplyEdits = %q, %v; want %v", got, err, c.wantErr)
			}
			var ee *EditError
			if errors.As(err, &ee) != (c.errIdx >= 0) {
				t.Fatalf("error %v: EditError %v, want %v", err, ee != nil, c.errIdx >= 0)
			}
			if ee != nil && (ee.Index != c.errIdx || ee.Count != c.count) {
				t.Fatalf("EditError{%d, %d}, want {%d, %d}: %v", ee.Index, ee.Count, c.errIdx, c.count, err)
			}
		})
	}
}
