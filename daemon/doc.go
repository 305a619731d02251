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
package daemon
