// Package inithandoff makes sure that a binary importing it never serves
// as a container's init: libcontainer v1.5.3 always starts a container's
// init by re-executing its caller's own binary (/proc/self/exe, as
// "ARGV0 init"), and has no option to name another. A C constructor,
// which runs before the Go runtime and before anything else in the
// process, sees that it was started that way and hands the process to
// the sealed sluice-init at fd FD (execveat), so the container's init is
// cmd/sluice-init: nsexec, a Go runtime and libcontainer's init, without
// the daemon's packages. Found without it, the process exits 1: the
// daemon binary is never the init, not even by fallback.
//
// sandbox imports it, so sluiced and every test binary that creates
// containers carry the constructor; sandbox opens the sealed copy of
// sluice-init and passes it as fd FD (docs/sandbox.md "CVE-2019-5736").
package inithandoff

// FD is where the sealed sluice-init is in a container's init process:
// the first of libcontainer's Process.ExtraFiles.
const FD = 3

// Arg is the argument libcontainer starts a container's init with.
const Arg = "init"
