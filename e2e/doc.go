// Package e2e holds black-box tests: they build (or take from
// $SLUICE_BIN_DIR) the real sluiced and sluice binaries, start the daemon
// as a process and talk to it only over its unix socket and the CLI.
package e2e
