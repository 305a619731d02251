// Package walk is the effectful engine of search and of list with depth:
// it walks a directory tree beneath a directory fd the caller already
// resolved and checked, and renders what it finds as JSON lines within a
// byte budget.
//
// Every step is one name, opened relative to its parent's held fd with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS) and
// O_NOFOLLOW, so a directory swapped for a symlink between listing and
// opening (the check-then-use class, CVE-2025-53109 in the MCP filesystem
// server) fails ELOOP instead of leading out; nothing is ever opened again
// by path. Symlinks are reported as entries and never followed. A file is
// opened O_PATH first and read only when fstat says it is a regular file,
// re-opened through /proc/self/fd (the same inode): a FIFO cannot block
// the walk and a device is never opened (opening /dev/watchdog arms it).
// By default the walk stays on the start directory's mount
// (RESOLVE_NO_XDEV; the mount id where openat2 is missing): a mount
// inside a root is another file system the manifest never named.
//
// The caller's Skip (the tool's never globs: authz owns them) sees every
// entry before anything else happens to it: a hidden name is not
// returned, not descended, not read, and not counted — not in the
// results, not in the limits on entries and results, not in Stats — so
// that nothing in a result depends on what a never-listed name holds.
// The one exception is MaxScan, the bound on directory entries read at
// all, which exists so that a directory of millions of hidden names
// cannot hold the daemon; it is far above any listing an agent is shown.
//
// Output is deterministic: each directory's entries in byte order of
// their names, depth first. Content search reads files on a bounded pool
// of workers and emits their results in walk order. Every limit that cut
// a result is named in Result.Limits and sets Truncated: nothing is cut
// silently.
//
// The daemon's search, for a tool t, the root index i its path resolved
// under and the directory handle h resolved for rel beneath that root
// (authz owns the never globs, so the skip filter is theirs):
//
//	skip := func(r, name string, isDir bool) bool {
//		return authz.NeverMatchResolved(t, i, path.Join(rel, r))
//	}
//	res, err := walk.Search(ctx, h.File(), walk.Query{Name: glob, Content: re}, walk.Options{
//		Skip: skip, RefuseHardLinks: t.RefusesHardLinks(),
//		MaxBytes: t.EffectiveMaxBytes(), MaxResults: args.MaxResults,
//	})
//
// and list with depth is walk.Tree(ctx, h.File(), depth, sizes, …) with
// the same filter.
package walk
