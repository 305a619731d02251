//go:build linux

package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/egress"
	"github.com/sluicehq/sluice/egress/netpolicy"
	"github.com/sluicehq/sluice/sandbox"
)

// egressMaxConns bounds the connections one container may hold open
// through the proxy at once (each is two fds of sluiced's); beyond it the
// proxy answers 503.
const egressMaxConns = 64

// egressConnRate and egressConnBurst bound how fast one call's command may
// open connections to its proxy (a token bucket, per call). Each served
// connection is a ledger record; without a bound one python loop wrote
// 52,137 records (35 MB) in 5 s. Connections over the rate are answered
// 503 before anything is read or dialed, and one record per call says how
// many were refused (reason busy).
const (
	egressConnRate  = 50  // per second
	egressConnBurst = 500 // at once
)

// connBucket is a token bucket; not safe for concurrent use (the proxy
// asks from its accepting goroutine only).
type connBucket struct {
	tokens float64
	last   time.Time
}

func newConnBucket(now time.Time) *connBucket {
	return &connBucket{tokens: egressConnBurst, last: now}
}

func (b *connBucket) take(now time.Time) bool {
	b.tokens = min(egressConnBurst, b.tokens+now.Sub(b.last).Seconds()*egressConnRate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// prepareEgress builds an execute tool's egress policy once per manifest
// load (errors name tools.NAME.egress.KEY) and gives its containers a
// loopback with sluiced's proxy on it, named by the proxy variables.
// Without egress the containers keep an empty network namespace.
func (e *execTool) prepareEgress(key string, t *authz.Tool) error {
	if t.Egress == nil {
		return nil
	}
	p, err := netpolicy.NewPolicy(netpolicy.Config{
		Hosts: t.Egress.Hosts, Schemes: t.Egress.Schemes,
		MaxBytesOut: t.Egress.MaxBytesOut, InsecureAllowPrivate: t.Egress.InsecureAllowPrivate,
	})
	if err != nil {
		return fmt.Errorf("manifest: %s.egress.%w", key, err)
	}
	e.egress = p
	e.spec.Egress = true
	// ALL_PROXY is left out: clients read it as a SOCKS proxy as often
	// as an HTTP one, and this proxy speaks only HTTP.
	for _, v := range authz.ProxyEnv {
		e.spec.Env = append(e.spec.Env, v+"="+sandbox.EgressProxyURL)
	}
	return nil
}

// serveEgress serves the box's proxy listener for the duration of the
// call: connections are accepted only from when the command is handed
// over until it has ended, and each is recorded under this call when it
// ends. stop ends the proxy (closing the listener and any connection
// still open) and waits for every record; it reports false when one
// could not be appended to the ledger.
func (c *call) serveEgress(et *execTool, box *sandbox.Box) (stop func() bool) {
	l := box.EgressListener()
	if l == nil {
		return func() bool { return true }
	}
	if et.egress == nil { // cannot happen: only egress tools' boxes listen
		l.Close()
		return func() bool { return true }
	}
	var failed atomic.Bool
	var refused int64 // read after Serve returned
	bucket := newConnBucket(time.Now())
	px := &egress.Proxy{Policy: et.egress, MaxConns: egressMaxConns, OnConn: func(r egress.ConnRecord) {
		if err := c.auditConn(r); err != nil {
			failed.Store(true)
		}
	}, Admit: func() bool {
		if bucket.take(time.Now()) {
			return true
		}
		refused++
		return false
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := px.Serve(ctx, l); err != nil && !errors.Is(err, net.ErrClosed) { // Destroy may close it first
			c.d.log.Warn("egress proxy", "err", err, "tool", c.req.Tool, "call_id", c.id)
		}
	}()
	return func() bool {
		cancel()
		<-done
		if refused > 0 {
			// One record counts the connections refused over the rate.
			if err := c.auditConn(egress.ConnRecord{Verdict: string(api.VerdictDeny), Reason: string(api.ReasonBusy),
				Detail: fmt.Sprintf("%d connections refused: over %d/s (burst %d) for one call", refused, egressConnRate, egressConnBurst)}); err != nil {
				failed.Store(true)
			}
		}
		return !failed.Load()
	}
}

// auditConn appends the record of one proxied connection (not synced:
// the call's result record, which follows, is synced before the result
// leaves the daemon, and the ledger keeps order).
func (c *call) auditConn(r egress.ConnRecord) error {
	rec := &audit.Record{
		Kind: audit.KindConnection, CallID: c.id, Principal: c.principalRecord(), Task: c.req.Task,
		Tool: c.req.Tool, Operation: api.OpExecute, Verdict: api.Verdict(r.Verdict), Reason: api.Reason(r.Reason),
		PolicyVersion: c.p.m.Version, Detail: r.Detail,
		Egress: &audit.Egress{Method: r.Method, Target: r.Target, BytesIn: r.BytesIn, BytesOut: r.BytesOut},
		Result: &audit.Result{OK: r.Reason == egress.ReasonAllowed, DurationMS: float64(r.Duration.Microseconds()) / 1000},
	}
	if r.Rule.Key != "" {
		rec.Rule = "tools." + c.req.Tool + ".egress." + r.Rule.Key + "[" + strconv.Itoa(r.Rule.Index) + "]"
	}
	if r.Addr.IsValid() {
		rec.Egress.Addr = r.Addr.String()
	}
	_, err := c.d.ledger.Append(rec)
	if err != nil {
		c.d.log.Error("audit connection failed; the call's output is withheld", "err", err, "call_id", c.id)
	}
	return err
}
