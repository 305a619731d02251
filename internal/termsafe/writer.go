package termsafe

import (
	"io"
	"unicode/utf8"
)

// Writer escapes text written through it as Escape does (text: newlines
// and tabs stay) before it reaches a terminal: a command's output, a
// file's content. A UTF-8 sequence split across two writes is held until
// it completes; Flush writes what is held (escaped, if it never did).
// Hidden counts what was escaped.
type Writer struct {
	w      io.Writer
	held   []byte
	Hidden int
}

// NewWriter returns a Writer that writes escaped text to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

func (t *Writer) Write(p []byte) (int, error) {
	b := append(t.held, p...)
	cut := len(b)
	for k := 1; k < utf8.UTFMax && k <= len(b); k++ {
		if utf8.RuneStart(b[len(b)-k]) {
			if !utf8.FullRune(b[len(b)-k:]) {
				cut = len(b) - k
			}
			break
		}
	}
	t.held = append([]byte(nil), b[cut:]...)
	out, n := Escape(string(b[:cut]), true)
	t.Hidden += n
	if _, err := io.WriteString(t.w, out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what a Write held back.
func (t *Writer) Flush() error {
	if len(t.held) == 0 {
		return nil
	}
	out, n := Escape(string(t.held), true)
	t.Hidden += n
	t.held = nil
	_, err := io.WriteString(t.w, out)
	return err
}
