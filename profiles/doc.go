// Package profiles ships sluice's default seccomp profile (default.json,
// OCI runtime-spec LinuxSeccomp format, the shape Docker and containerd
// use), the example manifest and the demo workspace.
package profiles

import _ "embed"

// DefaultSeccomp is profiles/default.json, compiled into sluiced so that
// execute tools are confined even when the file is not installed.
//
//go:embed default.json
var DefaultSeccomp []byte
