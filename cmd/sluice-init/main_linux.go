// Command sluice-init is the first process of every sluice container:
// libcontainer's init ("runc init"), and nothing else. sluiced checks it,
// keeps a sealed copy and hands each container's init process to it
// (internal/inithandoff), so a container's start pays for libcontainer's
// init alone, not for the daemon's 20 MB binary and its package inits
// (docs/sandbox.md "CVE-2019-5736", docs/performance.md).
//
// It imports libcontainer, its nsenter (whose C constructor joins the
// container's namespaces before the Go runtime starts) and timerslack;
// nothing else of sluice. It must never import internal/inithandoff.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"syscall"

	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter"

	"github.com/sluicehq/sluice/internal/timerslack"
)

// protocol is what "sluice-init protocol" prints: sandbox.initProtocol and
// the libcontainer version, which must be the daemon's (the init and its
// parent speak libcontainer's private protocol).
const protocol = "sluice-init 1"

// A package init runs on the main thread, as libcontainer's init needs,
// and before main: runc calls it from the same place.
func init() {
	if len(os.Args) == 2 && os.Args[1] == "init" {
		// fd 3 is where sluiced passed this binary; the handoff left
		// /dev/null there (internal/inithandoff). It stays open, so
		// that nothing the init opens without O_CLOEXEC lands on a
		// number the container inherits, and closes at the exec of
		// the helper: a command has only fds 0, 1 and 2.
		syscall.CloseOnExec(3)
		// sluiced's threads run with a larger timer slack, which a
		// process keeps across exec: the helper, and so the command,
		// get the kernel's default from this (locked, main) thread,
		// which execs the helper. Failing that they run with
		// sluiced's; nothing depends on it.
		_ = timerslack.ResetThread()
		libcontainer.Init() // never returns
	}
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "protocol" {
		fmt.Println(protocol, "runc", runcVersion())
		return
	}
	fmt.Fprintln(os.Stderr, "sluice-init: a sluice container's init, started by sluiced; not run by hand")
	os.Exit(2)
}

func runcVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/opencontainers/runc" {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "unknown"
}
