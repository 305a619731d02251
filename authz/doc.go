// Package authz owns the manifest (schema_version 1, strict) and the pure
// authorization decision.
//
// Nothing here performs a syscall or any I/O beyond what the caller hands in:
// Decide is a function of (manifest, principal, tool, args, resolved
// resource). That keeps decisions deterministic and lets replay re-decide a
// recorded call from the audit log alone. The zero Decision denies.
package authz
