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
//
// The chain alone cannot show that its newest records were cut: the last
// record left is still intact. So the syncer writes the durable head to an
// anchor beside the ledger (anchor.go) and to the log every few seconds;
// Open finds a ledger behind its anchor, appends a "truncated" record and
// continues the sequence past the anchored seq; Check reports heads the
// ledger does not reach. A reserve preallocated beyond the ledger's end
// keeps records, denials among them, writable when the disk fills; Health
// says when the ledger runs on it.
package audit
