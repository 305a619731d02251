// Package sandbox runs execute tools in short-lived libcontainer
// containers: read-only binds of what the manifest permits, seccomp, no
// network, cgroup limits and capped output streams (docs/sandbox.md).
package sandbox
