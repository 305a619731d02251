// Package cli implements the sluice command: calls, tools, health, reload
// and the audit ledger's verify and tail. cmd/sluice only wires it to
// os.Args and the exit code.
package cli
