// Package fsview serves an execute tool's mounts as a read-only FUSE
// filesystem whose every lookup is decided by sluice's own resolver.
//
// A bind of a workspace directory shows whatever the host puts there:
// masks mounted over never-listed files come off when an editor renames a
// new file over them (Linux detaches a mount whose dentry is unlinked or
// renamed over), files created later are never masked, and a unix socket
// or FIFO in the tree leads to a host service. A view has no masks to lose.
// Each name is resolved when it is looked up, beneath the mount's held root
// fd with openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS|RESOLVE_NO_SYMLINKS):
// a name that matches the tool's never globs (by its path from the mount),
// or that is a socket, FIFO or device, does not exist in the view. Nodes
// are paths, not inodes: every operation resolves its node's path again,
// so what a host rename puts at a path is what the path shows, and checks
// hold for whatever it is now. Symlinks are shown as symlinks; the kernel
// follows them inside the container, where everything reachable is a view
// again. Reads go to the backing fd through FUSE passthrough where the
// kernel has it (6.9+), so they cost what native reads cost.
//
// A view answers only root and the uids it admitted (its tool's live
// containers), EACCES to every other local user; each admitted uid holds
// at most MaxOpen files and directories open, and all views of a process
// together at most the soft RLIMIT_NOFILE less Reserve, so no container
// can take the daemon's fds (see access_linux.go). Directories are read
// in chunks as the kernel asks, never whole.
package fsview
