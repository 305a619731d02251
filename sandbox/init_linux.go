package sandbox

import (
	"os"
	"runtime"

	// A container's init is never this binary: its C constructor hands
	// the process to sluice-init (cmd/sluice-init) before the Go runtime
	// starts, or exits (docs/sandbox.md "CVE-2019-5736").
	_ "github.com/sluicehq/sluice/internal/inithandoff"
)

// MaybeInit turns this process into the seccomp exporter when it was
// started as one (see exportSeccomp), and never returns in that case.
// This package's own init() calls it, so the exporter runs only the
// package inits this package depends on; sluiced also calls it from an
// init() before any flag parsing.
//
// A container's init is not started here: libcontainer re-executes this
// binary as "ARGV0 init", and internal/inithandoff's constructor execs
// sluice-init before any Go code runs.
func MaybeInit() {
	if len(os.Args) > 1 && os.Args[1] == seccompExportArg {
		seccompExportChild()
	}
}

// The main thread never runs anything but the main goroutine. libcontainer
// joins each new container's mount namespace on a locked thread that it
// lets die afterwards; had that been the main thread, Go would wedge it
// there instead, and the process would keep the dead container's mount
// namespace (and its binds of a view) alive forever, with /proc/self
// showing that namespace to every mountinfo reader (Sweep, Leftovers).
func init() {
	runtime.LockOSThread()
	MaybeInit()
}
