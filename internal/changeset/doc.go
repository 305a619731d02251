// Package changeset reads an overlay's upper layer (a box's scratch
// layer, sandbox.Scratch) as the list of what a command changed: files
// created or modified (copied up whole), directories made, deletions
// (whiteouts). It only reads and refuses what is not plainly a file or a
// directory; what may be committed is the daemon's decision.
//
// Everything is reached through fds beneath the upper directory
// (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV), each
// entry through its parent's fd; no path is ever re-opened from the top.
package changeset
