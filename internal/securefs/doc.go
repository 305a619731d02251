// Package securefs resolves untrusted relative paths beneath a held root
// directory fd and hands back an fd, never a string to open later.
//
// The primary resolver is openat2(2) with RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS
// and O_PATH: the kernel refuses "..", absolute symlinks and procfs magic
// links that would leave the root, atomically with the lookup, so a symlink
// swapped in between a check and a use cannot redirect it (the MCP
// filesystem server CVE-2025-53109 class, and every check-then-open race).
// Callers fstat the O_PATH fd before opening it for I/O (a FIFO must never
// block the daemon) and re-open it only through /proc/self/fd.
//
// Where openat2 is missing (ENOSYS) the os.Root fallback walks the path one
// component at a time with O_NOFOLLOW; tests force it so that the one
// escape table runs against both.
package securefs
