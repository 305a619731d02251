//go:build linux

package daemon

import "github.com/sluicehq/sluice/daemon/transport"

// Peer is what the kernel says about the process on the other end of the
// socket (transport.Peer), read once when the connection was accepted.
type Peer = transport.Peer
