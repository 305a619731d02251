// Package udiff renders a unified diff (diff -u, three lines of context)
// between two texts, with bounded work: what an approver is shown for a
// parked write or edit, and what an edit returns.
//
// It is a copy of the algorithm in daemon/diff.go, exported: that one is
// unexported in package daemon, and internal packages may not import
// daemon (imports flow down). Once the operation wiring uses this package
// the daemon's copy goes. It is pure: no I/O, standard library only.
package udiff
