// Package audit is sluice's tamper-evident ledger: JSONL, one record per
// line, each carrying the hash of the one before it.
//
// A decision is appended with write(2) before anything runs, so a daemon
// crash cannot lose it, and made durable with fdatasync before any result
// leaves the daemon. Concurrent calls share one fdatasync (group commit).
// When the ledger cannot be written or synced it reports ErrUnavailable and
// the daemon denies (fail closed). On open, a torn last line left by a
// crash is cut back to the last whole record and a "recovered" record says
// how much was cut.
package audit
