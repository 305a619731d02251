//go:build !linux

package daemon

import (
	"errors"
	"fmt"
)

// ErrUnsupported is why there is no daemon here: sluiced resolves paths
// with openat2 beneath held fds, serves views over FUSE, runs commands in
// libcontainer containers and knows its callers by SO_PEERCRED, all of
// them Linux. On other platforms this package holds only this error, and
// cmd/sluiced prints it and exits; api/ and client/ build everywhere, so a
// program on a Mac can still talk to a Linux host's daemon.
var ErrUnsupported = fmt.Errorf("sluice: the daemon needs Linux (openat2, FUSE, namespaces and cgroups, SO_PEERCRED): %w", errors.ErrUnsupported)
