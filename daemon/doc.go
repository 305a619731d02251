// Package daemon is sluiced: the unix-socket HTTP server, peer credentials,
// the request pipeline of docs/design.md §1 (parse, identify, resolve, authorize,
// audit, execute, audit, return) and manifest reloads.
//
// A request can never claim an identity: the principal comes from the
// socket's SO_PEERCRED. A path is authorized only as the fd the kernel
// resolved it to, and the file tools act on that fd. Nothing runs until
// its decision is in the audit ledger, and nothing leaves until it is
// durable there.
//
// Under systemd it serves the socket systemd passes and tells systemd when
// it is ready, reloading or stopping (systemd.go); --metrics-listen serves
// Prometheus metrics on a loopback address (metrics.go).
//
// # Groups
//
// The package's files fall in groups, each one concern (docs/design.md §2):
// the HTTP handlers, tasks, events and systemd (transport); the steps of a
// call (pipeline); the operations' table (ops.go) and their effectful
// halves (operations: op_NAME.go, with the commit machinery writes and
// deletes share and execute's egress); parked calls (approvals); the
// interrupted writes found at start (recovery); loading a manifest
// (policy); Prometheus metrics; the Daemon and its ledger (core).
//
// Which group may use which group's names is held by internal/deptest's
// TestDaemonGroups, which reads the list below: an operation uses only
// what the pipeline offers it; approvals, transport and recovery use no
// operation's code; only the table names an executor. A new file must be
// placed in a group; a new op_NAME.go is in the operations group.
//
//	core:       daemon.go daemon_other.go doc.go ledger.go caches.go
//	transport:  http.go tasks.go events.go systemd.go status.go tokens_http.go mcp.go
//	pipeline:   pipeline.go request.go registry.go resolve.go targets.go present.go source.go reasons.go admit.go ratelimit.go wirejson.go ids.go schema.go budget.go tokens.go tokens_roots.go redact.go
//	table:      ops.go
//	operations: op_*.go writes.go exec_egress.go exec_args.go exec_changeset.go exec_cache.go
//	approvals:  approvals.go spill_change.go approvals_after.go approvals_scale.go
//	recovery:   recover.go
//	policy:     policy.go check.go
//	metrics:    metrics.go
package daemon
