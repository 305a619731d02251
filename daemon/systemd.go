//go:build linux

package daemon

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/sluicehq/sluice/daemon/transport"
)

// DefaultWarmTimeout bounds how long start waits for the warm pools' first
// containers before it tells systemd READY=1 anyway (and serves cold).
const DefaultWarmTimeout = 20 * time.Second

// listen is the activated socket when systemd passed one, else a socket
// bound at cfg.Socket (see transport.ListenUnix). activated says which.
func (d *Daemon) listen() (ln net.Listener, activated bool, err error) {
	ln, err = transport.ActivatedListener()
	if err != nil || ln != nil {
		if ln != nil && ln.Addr().String() != d.cfg.Socket {
			d.log.Info("serving the socket systemd passed, not --socket", "socket", ln.Addr().String(), "flag", d.cfg.Socket)
		}
		return ln, ln != nil, err
	}
	ln, err = transport.ListenUnix(d.cfg.Socket)
	return ln, false, err
}

// notify sends state to systemd (sd_notify); outside systemd
// (NOTIFY_SOCKET unset) it does nothing.
func (d *Daemon) notify(state ...string) {
	if err := transport.Notify(state...); err != nil {
		d.log.Warn("sd_notify", "err", err)
	}
}

// status is the one-line STATUS= systemd shows in `systemctl status`.
func (d *Daemon) status() string {
	d.mu.RLock()
	p := d.pol
	d.mu.RUnlock()
	running, queued := d.slots.Stats()
	warm, pools := p.poolsWarm()
	v := strings.TrimPrefix(p.m.Version, "sha256:")
	if len(v) > 12 {
		v = v[:12]
	}
	return fmt.Sprintf("STATUS=policy %s, %d tools, %d calls in flight, %d containers running, %d queued, pools %d/%d warm",
		v, len(p.m.Tools), d.calls.inFlight(), running, queued, warm, pools)
}

// waitWarm waits, at most timeout, until every pool of the current policy
// has its first container ready, so that READY=1 means the first execute
// calls do not start cold. It returns how many of how many pools are warm.
// A reload while it waits closes the pools it waits for: it then returns.
func (d *Daemon) waitWarm(ctx context.Context, timeout time.Duration) (warm, pools int) {
	d.mu.RLock()
	p := d.pol
	d.mu.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, pool := range p.pools() {
		if pool != nil {
			pools++
			if pool.WaitWarm(ctx) {
				warm++
			}
		}
	}
	return warm, pools
}

// poolsWarm counts the policy's pools with a container waiting now.
func (p *policy) poolsWarm() (warm, pools int) {
	for _, pool := range p.pools() {
		if pool != nil {
			pools++
			if pool.Ready() > 0 || pool.Min() == 0 { // min 0: fills only under load
				warm++
			}
		}
	}
	return warm, pools
}
