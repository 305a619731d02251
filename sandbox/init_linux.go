package sandbox

import (
	"os"
	"runtime"

	"github.com/opencontainers/runc/libcontainer"
	// nsenter's C constructor joins the container's namespaces before the
	// Go runtime starts in a container's init process; it must be linked
	// into the daemon binary.
	_ "github.com/opencontainers/runc/libcontainer/nsenter"

	"github.com/sluicehq/sluice/internal/timerslack"
)

// InitArg is the argument libcontainer re-executes the daemon binary with
// to become a container's init.
const InitArg = "init"

// MaybeInit turns this process into a container's init when it was started
// as one, and never returns in that case. This package's own init() calls
// it, so a container's init runs only the package inits this package
// depends on (Go initializes a package right after its imports, and this
// one imports none of the daemon's HTTP, metrics or audit packages):
// prometheus' client, expfmt, promhttp and the daemon's own inits (a third
// of the package-init time: GODEBUG=inittrace=1 sluiced init) are never
// run there. sluiced also calls it from an init() before any flag parsing.
// The package inits this package does depend on still run in each
// container's init, so they must stay cheap.
func MaybeInit() {
	if len(os.Args) > 1 && os.Args[1] == InitArg {
		// sluiced's threads run with a larger timer slack, which a
		// process keeps across exec: the helper, and so the command,
		// get the kernel's default from this (locked, main) thread,
		// which execs the helper. Failing that they run with
		// sluiced's; nothing depends on it.
		_ = timerslack.ResetThread()
		libcontainer.Init()
	}
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
