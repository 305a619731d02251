//go:build linux

package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/egress"
	"github.com/sluicehq/sluice/egress/netpolicy"
	"github.com/sluicehq/sluice/internal/redact"
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

// DefaultEgressAuditBytes is how many ledger bytes one call's proxied
// connections may take as records of their own (Config.EgressAuditBytes):
// some 1,500 connections at their typical size, 600 at their largest.
// Each record is bounded (boundConn) and at most egressConnRate a second
// are served, but a command may run for an hour: before this bound one
// 20 s call wrote 49 MB of connection records.
const DefaultEgressAuditBytes = 1 << 20

// Bounds of what a connection record keeps of text the command chose.
const (
	maxConnDetail = 256 // the proxy's why: an error, a status
	maxConnMethod = 16
	maxConnTarget = 1024 // a target already passed through redact.URL
	maxConnHosts  = 8    // hosts named in the summary of what was not recorded
)

// connAudit keeps a call's connection records within its budget: records
// of refused connections (malformed, denied, busy) take at most half of
// it, so a flood of junk cannot crowd out the records of connections that
// reached the network. Past the budget a connection is only counted, and
// summary says what was not recorded. Safe for concurrent use (the proxy
// reports each connection from its own goroutine).
type connAudit struct {
	mu     sync.Mutex
	budget int64
	used   int64 // bytes of records written
	denied int64 // of which for refused connections

	// What was not recorded.
	skipAllowed, skipDenied int
	bytesIn, bytesOut       int64
	hosts                   map[string]int
}

// admit reports whether a record of size bytes for r may be written, and
// counts r when not.
func (a *connAudit) admit(r *egress.ConnRecord, size int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	refused := r.Verdict != string(api.VerdictAllow)
	if a.used+size <= a.budget && (!refused || a.denied+size <= a.budget/2) {
		a.used += size
		if refused {
			a.denied += size
		}
		return true
	}
	if refused {
		a.skipDenied++
	} else {
		a.skipAllowed++
		if a.hosts == nil {
			a.hosts = map[string]int{}
		}
		if _, ok := a.hosts[r.Host]; ok || len(a.hosts) < maxConnHosts {
			a.hosts[r.Host]++
		} else {
			a.hosts[""]++ // other hosts
		}
	}
	a.bytesIn += r.BytesIn
	a.bytesOut += r.BytesOut
	return false
}

// summary is the dropped record's detail, or "" when every connection was
// recorded. Call it once the proxy stopped.
func (a *connAudit) summary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.skipAllowed + a.skipDenied
	if n == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d connections not recorded: their records would pass this call's audit budget of %d bytes (refused connections %d); %d allowed, %d refused; %d bytes out, %d bytes in",
		n, a.budget, a.budget/2, a.skipAllowed, a.skipDenied, a.bytesOut, a.bytesIn)
	if len(a.hosts) > 0 {
		b.WriteString("; allowed to ")
		hosts := slices.Sorted(maps.Keys(a.hosts))
		first := true
		for _, h := range hosts {
			if h == "" {
				continue
			}
			if !first {
				b.WriteString(", ")
			}
			first = false
			fmt.Fprintf(&b, "%s ×%d", h, a.hosts[h])
		}
		if k := a.hosts[""]; k > 0 {
			fmt.Fprintf(&b, ", other hosts ×%d", k)
		}
	}
	return b.String()
}

// serveEgress serves the box's proxy listener for the duration of the
// call: connections are accepted only from when the command is handed
// over until it has ended, and each is recorded under this call when it
// ends, within the call's audit budget (connAudit). stop ends the proxy
// (closing the listener and any connection still open) and waits for
// every record; it reports false when one could not be appended to the
// ledger.
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
	budget := &connAudit{budget: c.d.cfg.EgressAuditBytes}
	px := &egress.Proxy{Policy: et.egress, MaxConns: egressMaxConns, OnConn: func(r egress.ConnRecord) {
		rec := c.connRecord(r)
		if !budget.admit(&r, int64(audit.LineBytes(rec))) {
			return
		}
		if err := c.appendConn(rec); err != nil {
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
			if err := c.appendConn(c.connRecord(egress.ConnRecord{Verdict: string(api.VerdictDeny), Reason: api.ReasonBusy,
				Detail: fmt.Sprintf("%d connections refused: over %d/s (burst %d) for one call", refused, egressConnRate, egressConnBurst)})); err != nil {
				failed.Store(true)
			}
		}
		if sum := budget.summary(); sum != "" {
			// One record says what the budget left unrecorded.
			rec := &audit.Record{Kind: audit.KindDropped, CallID: c.id, Principal: c.principalRecord(), Token: c.tokenRef(), Task: c.req.Task,
				Tool: c.req.Tool, Operation: api.OpExecute, Reason: api.ReasonLimitExceeded, PolicyVersion: c.p.m.Version,
				Detail: sum, Egress: &audit.Egress{BytesIn: budget.bytesIn, BytesOut: budget.bytesOut}}
			if err := c.appendConn(rec); err != nil {
				failed.Store(true)
			}
		}
		return !failed.Load()
	}
}

// connRecord is the ledger record of one proxied connection. Every field
// the command chose is bounded (the proxy already keeps a plain request's
// query by digest): a record is at most a few KiB whatever was sent.
func (c *call) connRecord(r egress.ConnRecord) *audit.Record {
	rec := &audit.Record{
		Kind: audit.KindConnection, CallID: c.id, Principal: c.principalRecord(), Token: c.tokenRef(), Task: c.req.Task,
		Tool: c.req.Tool, Operation: api.OpExecute, Verdict: api.Verdict(r.Verdict), Reason: r.Reason,
		PolicyVersion: c.p.m.Version, Detail: redact.String(r.Detail, maxConnDetail),
		Egress: &audit.Egress{Method: redact.String(r.Method, maxConnMethod), Target: redact.String(r.Target, maxConnTarget),
			BytesIn: r.BytesIn, BytesOut: r.BytesOut},
		Result: &audit.Result{OK: r.Reason == api.ReasonAllowed, DurationMS: float64(r.Duration.Microseconds()) / 1000},
	}
	if r.Rule.Key != "" {
		rec.Rule = "tools." + c.req.Tool + ".egress." + r.Rule.Key + "[" + strconv.Itoa(r.Rule.Index) + "]"
	}
	if r.Addr.IsValid() {
		rec.Egress.Addr = r.Addr.String()
	}
	return rec
}

// appendConn appends a connection's record, or a summary of them (not
// synced: the call's result record, which follows, is synced before the
// result leaves the daemon, and the ledger keeps order).
func (c *call) appendConn(rec *audit.Record) error {
	_, err := c.d.ledger.Append(rec)
	if err != nil {
		c.d.log.Error("audit connection failed; the call's output is withheld", "err", err, "call_id", c.id)
	}
	return err
}
