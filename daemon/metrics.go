//go:build linux

package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/api"
)

// metrics are sluiced's Prometheus metrics, served on --metrics-listen.
// A nil *metrics (the default: no --metrics-listen) counts nothing, so
// the hooks at their call sites stay one line each and cost nothing when
// metrics are off. Each daemon has its own registry: tests run several in
// one process.
type metrics struct {
	reg         *prometheus.Registry
	calls       *prometheus.CounterVec   // tool, verdict, reason
	decision    prometheus.Histogram     // request in -> decided
	execution   *prometheus.HistogramVec // tool
	poolHits    *prometheus.CounterVec   // tool
	poolMisses  *prometheus.CounterVec   // tool
	auditAppend prometheus.Histogram
	auditSync   prometheus.Histogram
	reloads     *prometheus.CounterVec // result
	byPrincipal *prometheus.CounterVec // principal, verdict
	denials     *prometheus.CounterVec // principal, reason
}

// toolUnknown is the tool label of calls that name no tool of the
// manifest: the name a client sent is not a label value, or one client
// could make a new series per request.
const toolUnknown = "_unknown"

// principalUnmapped is the principal label of calls from a peer that maps
// to no principal (all denied): principal labels are the manifest's names.
const principalUnmapped = "_unmapped"

// Latency buckets: decisions take tens of µs to a few ms (resolving a path
// is a few openat2 calls); execution spans a file read (µs) to a command
// (seconds); an fdatasync takes 0.1-10 ms on real disks.
var (
	decisionBuckets  = prometheus.ExponentialBuckets(10e-6, 2.5, 12) // 10 µs .. ~0.6 s
	executionBuckets = prometheus.ExponentialBuckets(50e-6, 3, 14)   // 50 µs .. ~80 s
	auditBuckets     = prometheus.ExponentialBuckets(5e-6, 2.5, 12)  // 5 µs .. ~0.3 s
)

func newMetrics(d *Daemon) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_calls_total",
			Help: "Decided tool calls by tool, verdict (allow, deny) and final reason code.",
		}, []string{"tool", "verdict", "reason"}),
		decision: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_decision_seconds",
			Help:    "From a call's request read to its decision: parse, identify, resolve, authorize (approval waits excluded).",
			Buckets: decisionBuckets,
		}),
		execution: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_execution_seconds",
			Help:    "Executing an allowed call, by tool: the file operation, or the command with its container (queueing for a slot included).",
			Buckets: executionBuckets,
		}, []string{"tool"}),
		poolHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_pool_hits_total",
			Help: "Execute calls that took a warm container from their tool's pool.",
		}, []string{"tool"}),
		poolMisses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_pool_misses_total",
			Help: "Execute calls that found no warm container (pool empty, or pool 0) and started one cold.",
		}, []string{"tool"}),
		auditAppend: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_audit_append_seconds",
			Help:    "Appending one record to the audit ledger (write(2), not synced).",
			Buckets: auditBuckets,
		}),
		auditSync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_audit_sync_seconds",
			Help:    "A caller's wait for its records to be durable (fdatasync, group-committed: concurrent calls share one).",
			Buckets: auditBuckets,
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_reloads_total",
			Help: "Manifest reloads (SIGHUP or POST /v1/reload) by result: ok or refused.",
		}, []string{"result"}),
		byPrincipal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_principal_calls_total",
			Help: "Decided tool calls by principal (the manifest's name; _unmapped for a peer that maps to none) and verdict.",
		}, []string{"principal", "verdict"}),
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_principal_denials_total",
			Help: "Denied tool calls by principal and reason code.",
		}, []string{"principal", "reason"}),
	}
	m.reg.MustRegister(m.byPrincipal, m.denials,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_approvals_parked", Help: "Calls waiting for an approver now.",
		}, func() float64 { return float64(len(d.approvals.list())) }),
	)
	m.reg.MustRegister(m.calls, m.decision, m.execution, m.poolHits, m.poolMisses, m.auditAppend, m.auditSync, m.reloads,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_calls_in_flight", Help: "Calls being handled now (parked for approval included).",
		}, func() float64 { return float64(d.calls.inFlight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_containers_running", Help: "Container slots held by execute calls (at most --max-containers).",
		}, func() float64 { r, _ := d.slots.Stats(); return float64(r) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_containers_queued", Help: "Execute calls waiting for a container slot.",
		}, func() float64 { _, q := d.slots.Stats(); return float64(q) }),
		&stateCollector{d: d},
		&budgetCollector{d: d}, // budget.go
	)
	return m
}

// stateCollector reports, at each scrape, what is read from the daemon's
// current state rather than counted: the pools of the policy in force,
// the policy itself, and the connection table.
type stateCollector struct{ d *Daemon }

var (
	poolReadyDesc = prometheus.NewDesc("sluice_pool_ready",
		"Warm containers waiting in an execute tool's pool now.", []string{"tool"}, nil)
	poolSizeDesc = prometheus.NewDesc("sluice_pool_size",
		"Warm containers an execute tool's pool keeps when full (manifest \"pool\").", []string{"tool"}, nil)
	policyDesc = prometheus.NewDesc("sluice_policy_info",
		"The manifest in force: 1, labelled with its policy_version.", []string{"policy_version"}, nil)
	connsOpenDesc = prometheus.NewDesc("sluice_connections_open",
		"Client connections open now.", nil, nil)
	connsEvictedDesc = prometheus.NewDesc("sluice_connections_evicted_total",
		"Idle connections closed to admit a new one at a connection cap.", nil, nil)
	connsRefusedDesc = prometheus.NewDesc("sluice_connections_refused_total",
		"Connections refused at a cap because every connection there had a request in flight.", nil, nil)
)

func (s *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolReadyDesc, poolSizeDesc, policyDesc, connsOpenDesc, connsEvictedDesc, connsRefusedDesc} {
		ch <- d
	}
}

func (s *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s.d.mu.RLock()
	p := s.d.pol
	s.d.mu.RUnlock()
	ch <- prometheus.MustNewConstMetric(policyDesc, prometheus.GaugeValue, 1, p.m.Version)
	pools := p.pools()
	names := make([]string, 0, len(pools))
	for name := range pools {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ready, size := 0, 0
		if pool := pools[name]; pool != nil {
			ready, size = pool.Ready(), pool.Size()
		}
		ch <- prometheus.MustNewConstMetric(poolReadyDesc, prometheus.GaugeValue, float64(ready), name)
		ch <- prometheus.MustNewConstMetric(poolSizeDesc, prometheus.GaugeValue, float64(size), name)
	}
	if s.d.conns != nil {
		open, evicted, refused := s.d.conns.Stats()
		ch <- prometheus.MustNewConstMetric(connsOpenDesc, prometheus.GaugeValue, float64(open))
		ch <- prometheus.MustNewConstMetric(connsEvictedDesc, prometheus.CounterValue, float64(evicted))
		ch <- prometheus.MustNewConstMetric(connsRefusedDesc, prometheus.CounterValue, float64(refused))
	}
}

// Hooks. Each is nil-safe: without --metrics-listen they do nothing.

// called counts a call once its result is sent. A denial is also
// counted, metrics or not, for GET /v1/status's recent denials.
func (m *metrics) called(c *call, o *outcome) {
	verdict := c.dec.WireVerdict()
	if verdict == api.VerdictDeny {
		c.d.recent.add(time.Now(), c.owner, c.dec.Reason)
	}
	if m == nil {
		return
	}
	tool := c.req.Tool
	if c.tool == nil {
		tool = toolUnknown
	}
	reason := c.dec.Reason
	if o != nil {
		reason = o.reason
	}
	m.calls.WithLabelValues(tool, string(verdict), string(reason)).Inc()
	principal := c.owner
	if principal == "" {
		principal = principalUnmapped
	}
	m.byPrincipal.WithLabelValues(principal, string(verdict)).Inc()
	if verdict == api.VerdictDeny {
		m.denials.WithLabelValues(principal, string(c.dec.Reason)).Inc()
	}
}

// decided observes the time from a call's start to its decision.
func (m *metrics) decided(c *call) {
	if m == nil {
		return
	}
	m.decision.Observe(time.Since(c.start).Seconds())
}

// executed observes how long an allowed call's execution took.
func (m *metrics) executed(c *call, took time.Duration) {
	if m == nil {
		return
	}
	m.execution.WithLabelValues(c.req.Tool).Observe(took.Seconds())
}

// poolGet counts an execute call's warm (hit) or cold (miss) container.
func (m *metrics) poolGet(tool string, warm bool) {
	if m == nil {
		return
	}
	if warm {
		m.poolHits.WithLabelValues(tool).Inc()
	} else {
		m.poolMisses.WithLabelValues(tool).Inc()
	}
}

// reloaded counts a reload by its result.
func (m *metrics) reloaded(err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "refused"
	}
	m.reloads.WithLabelValues(result).Inc()
}

// checkMetricsAddr refuses a metrics address that is not loopback unless
// anyAddr: the metrics have no authentication and tell anyone who can
// reach them which tools agents call, how often, and what was denied.
func checkMetricsAddr(addr string, anyAddr bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--metrics-listen %q: %w (want HOST:PORT, e.g. 127.0.0.1:9464)", addr, err)
	}
	if anyAddr || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--metrics-listen %q is not a loopback address: the metrics have no authentication and show "+
		"which tools agents call, how often and what was denied; listen on 127.0.0.1 or [::1] and scrape through "+
		"a tunnel or a proxy, or pass --insecure-metrics-any-addr to expose them anyway", addr)
}

// serveMetrics listens on the metrics address and serves /metrics until
// the returned server is shut down.
func (d *Daemon) serveMetrics() (*http.Server, error) {
	if err := checkMetricsAddr(d.cfg.MetricsListen, d.cfg.InsecureMetricsAnyAddr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", d.cfg.MetricsListen)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	// "localhost" could name any address in /etc/hosts: check what was bound.
	if ta, ok := ln.Addr().(*net.TCPAddr); !d.cfg.InsecureMetricsAnyAddr && (!ok || !ta.IP.IsLoopback()) {
		ln.Close()
		return nil, fmt.Errorf("--metrics-listen %q bound %s, which is not loopback", d.cfg.MetricsListen, ln.Addr())
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.m.reg, promhttp.HandlerOpts{
		ErrorLog: promLogger{d}, MaxRequestsInFlight: 4, Timeout: 10 * time.Second,
	}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 8 << 10}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("metrics server stopped", "err", err)
		}
	}()
	d.log.Info("serving metrics", "addr", "http://"+ln.Addr().String()+"/metrics")
	if d.cfg.MetricsListening != nil {
		d.cfg.MetricsListening(ln.Addr().String())
	}
	return srv, nil
}

func stopMetrics(srv *http.Server) {
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if srv.Shutdown(ctx) != nil {
		srv.Close()
	}
}

// promLogger sends promhttp's errors to the daemon's log.
type promLogger struct{ d *Daemon }

func (l promLogger) Println(v ...any) { l.d.log.Warn("metrics", "err", fmt.Sprint(v...)) }
