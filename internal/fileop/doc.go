// Package fileop performs the effects of the file tools that change or
// describe files (write, edit, delete, move, mkdir, stat, ranged reads)
// beneath a securefs.Root: on the fd of the parent directory that the
// kernel resolved, never on a path looked up again.
//
// ResolveParent resolves a path's parent directory with securefs (symlinks
// followed only while they stay beneath the root, as for reads) and keeps
// the final name apart, checked to be one plain name. Everything after
// that is an *at call on the parent's fd with that one name, so a
// directory swapped for a symlink after the check cannot redirect a write
// (the check-then-use class that openat2 closes for reads), and the final
// name is never followed: a symlink there is refused by Write and removed
// itself, not its target, by Delete; a hard link to a file outside the root
// is replaced, never written through.
//
// A write never changes a file in place. The new content goes into an
// unnamed O_TMPFILE inode in the same directory (a named ".sluice-tmp-"
// file where the filesystem lacks O_TMPFILE), is fsynced, then linked to
// the name (create) or renamed over it (replace), and the directory is
// fsynced: a crash at any point leaves the old file or the new one, never
// a torn one. The caller's precondition (if_match, the task's generation)
// is evaluated on the file as it is at commit time, after the content is
// durable and immediately before the link or rename; Locks serializes the
// daemon's own writers and deleters of one name so that between them the
// precondition cannot go stale. The daemon names the temporary file
// (WriteOptions.TempName: from the call id, which its durable decision
// record names) so that after a crash it finds it from the ledger and
// removes it with RemoveTemp; hooks report each temporary name.
//
// Space is budgeted: a write that would leave its file system (fstatfs on
// the parent's fd) below a Reserve is refused before a byte is written,
// and ENOSPC or EDQUOT while writing removes the temporary inode; both
// wrap ENOSPC/EDQUOT for internal/errclass. A change that committed but
// whose directory fsync failed is ErrNotDurable, returned with the filled
// result: the caller reports what happened. Hashing for if_match and for a
// delete's record reads at most MaxHashBytes and stops with its context.
//
// An edit is ApplyEdits (pure: exact replacements, each matching exactly
// once) on what Parent.ReadAll read, committed by Write with the digest of
// that read as its precondition. A move is one renameat2(RENAME_NOREPLACE)
// between two held parent fds, under both names' locks (Locks.LockPair),
// bound to the source inode the decision saw; Parent.WalkNames lists what
// a directory move carries, for the decision's never check. Mkdir and
// MkdirAll make directories one component at a time beneath a held fd,
// following no symlink. Stat describes a resolved handle; ReadRange
// selects lines of a held file, bounded by max_bytes.
package fileop
