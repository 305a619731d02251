//go:build !linux || !cgo

package inithandoff

// Linked reports that the constructor is in this binary: not without cgo
// (or off Linux), where sandbox refuses to create containers.
const Linked = false
