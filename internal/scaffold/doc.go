// Package scaffold writes a first manifest for a project: what `sluice init`
// does (DESIGN §10 "First hour"; docs/manifest.md, "Starting a manifest:
// sluice init").
//
// It detects the project's test command (Go, Python, Node), builds one
// document model of the manifest, and renders it as commented TOML or as
// JSON (whose comments are returned beside it, to be printed). It never
// decides policy at load: the manifest it writes is checked by the same
// loader sluiced uses (authz.ParseFile, daemon.Check), in its tests.
//
// It does no I/O beyond reading the project's top-level marker files and
// writing the manifest atomically (WriteFile), never over an existing
// file unless asked.
package scaffold
