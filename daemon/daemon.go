//go:build linux

package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/daemon/admission"
	"github.com/sluicehq/sluice/daemon/mcphost"
	"github.com/sluicehq/sluice/daemon/recovery"
	"github.com/sluicehq/sluice/daemon/transport"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/timerslack"
	"github.com/sluicehq/sluice/sandbox"
)

// Config is everything sluiced needs; cmd/sluiced fills it from flags.
type Config struct {
	Manifest string // path of the manifest file
	Socket   string // unix socket path; default api.DefaultSocket
	StateDir string // holds audit.jsonl; default /var/lib/sluice
	Logger   *slog.Logger

	// MaxBodyBytes bounds a request body (default 1 MiB).
	MaxBodyBytes int64
	// MaxConns bounds open connections (default 1024). At the cap an idle
	// connection is closed to admit a new one (see transport.Conns).
	MaxConns int
	// MaxConnsPerUID bounds one peer uid's open connections (default
	// 256), so that one local user cannot take every slot of MaxConns.
	MaxConnsPerUID int
	// MaxContainers caps the containers running calls at once (default
	// 4 × CPUs). Warm pool containers waiting for a call do not count.
	MaxContainers int
	// QueueTimeout bounds how long an execute call over MaxContainers
	// waits, in FIFO order, for a slot before it ends busy (default 10 s).
	// The wait is not counted in the command's timeout_ms.
	QueueTimeout time.Duration
	// MaxParked bounds the calls one principal may have waiting for
	// approval at once (default 16); beyond it a call is denied busy.
	MaxParked int
	// ShutdownGrace is how long SIGTERM waits for calls in flight before
	// it ends them with reason shutdown (default 10 s).
	ShutdownGrace time.Duration
	// TaskTTL is how long a cancelled task stays cancelled (default 1 h).
	TaskTTL time.Duration
	// ReadTimeout bounds reading one request, headers and body, so a
	// client that dribbles bytes cannot pin a connection (default 10 s).
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one response (or one streamed event)
	// to a client that does not read (default 1 min).
	WriteTimeout time.Duration
	// RunDir holds sandbox state, container rootfs dirs and a minimal
	// /etc per container uid (default /run/sluice/sandbox).
	RunDir string
	// UIDRange is the block of host uids (each also a gid) containers run
	// as, one of its own per live container; ids a host account has are
	// skipped (zero: sandbox.DefaultIDRange).
	UIDRange sandbox.IDRange
	// Helper is the sluice-helper binary that waits in pooled containers
	// (default: sluice-helper beside the sluiced executable).
	Helper string
	// Init is the sluice-init binary every container's init runs, checked
	// and sealed at start (default: sluice-init beside Helper; see
	// sandbox.Options.Init).
	Init string
	// ResolveMode selects the path resolver (tests force the fallback).
	ResolveMode securefs.Mode
	// WarmTimeout bounds how long start waits for the warm pools' first
	// containers before it tells systemd READY=1 anyway (default 20 s).
	WarmTimeout time.Duration
	// MetricsListen, if set, is a loopback HOST:PORT where Prometheus
	// metrics are served at /metrics (see metrics.go).
	MetricsListen string
	// InsecureMetricsAnyAddr allows a MetricsListen that is not loopback.
	InsecureMetricsAnyAddr bool
	// MetricsListening, if set, is called with the metrics address once
	// it is bound (tests listen on port 0).
	MetricsListening func(addr string)
	// Ready, if set, is called once the socket is listening.
	Ready func()
	// MinFree is the space a write must leave on its target file system
	// (sluiced --min-free): the zero value is 5% of it or 1 GiB,
	// whichever is smaller; Off disables it. A write below it ends
	// no_space before it starts, so that an agent cannot fill the file
	// system the ledger shares and deny every principal.
	MinFree fileop.Reserve
	// EgressAuditBytes bounds the ledger bytes one execute call's
	// proxied connections may take as records of their own (default
	// DefaultEgressAuditBytes): beyond it a connection is counted, not
	// recorded, and one dropped record at the call's end says what was
	// not recorded (docs/audit.md).
	EgressAuditBytes int64

	// slotQueued, if set, is called each time an execute call joins the
	// container queue (tests line callers up without sleeping).
	slotQueued func()
	// tokenNow, if set, is the delegation tokens' clock (tests expire
	// tokens without sleeping).
	tokenNow func() time.Time
	// approvalClock, if set, is the clock grants expire by (tests move
	// it instead of sleeping; approvals_scale.go).
	approvalClock func() time.Time
}

// Lifecycle defaults.
const (
	DefaultShutdownGrace = 10 * time.Second
	DefaultTaskTTL       = time.Hour
)

// DefaultStateDir is where the audit ledger lives by default.
const DefaultStateDir = "/var/lib/sluice"

// DefaultRunDir is where sandbox state lives by default.
const DefaultRunDir = "/run/sluice/sandbox"

// Admission defaults. A queued call waits at most DefaultQueueTimeout: long
// enough to ride out a burst (at 4 slots per CPU and calls of a second or
// two, a queue of dozens drains in that time), short enough that a caller
// learns the daemon is saturated well before its own timeouts.
const (
	DefaultMaxConns       = 1024
	DefaultMaxConnsPerUID = 256
	DefaultQueueTimeout   = 10 * time.Second
)

// DefaultMaxContainers is 4 per CPU: enough for commands that wait on I/O
// to overlap, few enough that a burst does not spend every call's
// timeout_ms waiting for a core.
func DefaultMaxContainers() int { return 4 * runtime.NumCPU() }

func (c *Config) setDefaults() {
	if c.Socket == "" {
		c.Socket = api.DefaultSocket
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.RunDir == "" {
		c.RunDir = DefaultRunDir
	}
	if c.Helper == "" {
		if exe, err := os.Executable(); err == nil {
			c.Helper = filepath.Join(filepath.Dir(exe), "sluice-helper")
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxConnsPerUID <= 0 {
		c.MaxConnsPerUID = DefaultMaxConnsPerUID
	}
	if c.MaxContainers <= 0 {
		c.MaxContainers = DefaultMaxContainers()
	}
	if c.QueueTimeout <= 0 {
		c.QueueTimeout = DefaultQueueTimeout
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.TaskTTL <= 0 {
		c.TaskTTL = DefaultTaskTTL
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 10 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = time.Minute
	}
	if c.WarmTimeout <= 0 {
		c.WarmTimeout = DefaultWarmTimeout
	}
	if c.EgressAuditBytes <= 0 {
		c.EgressAuditBytes = DefaultEgressAuditBytes
	}
}

// Peer is what the kernel says about the process on the other end of the
// socket (transport.Peer), read once when the connection was accepted.
type Peer = transport.Peer

// Daemon is a running sluiced.
type Daemon struct {
	cfg    Config
	log    *slog.Logger
	ledger meteredLedger
	m      *metrics         // nil without MetricsListen
	conns  *transport.Conns // open connections
	mcp    *mcphost.Host    // attached `sluice mcp` sessions

	mu  sync.RWMutex
	pol *policy

	runnerMu sync.Mutex
	runner   *sandbox.Runner

	reloadMu sync.Mutex
	// cgroups is where containers' cgroups go, computed once at start.
	cgroups sandbox.CgroupLayout
	// ready is set once systemd was told READY=1: reloads are then
	// bracketed by RELOADING=1 and READY=1.
	ready atomic.Bool

	slots     *admission.Slots // containers running calls
	calls     *registry        // calls in flight, by id and task
	recent    denialLog        // denials of the last minutes, for GET /v1/status (status.go)
	approvals *approvals       // calls waiting for a human
	caches    *cacheSet        // execute tools' caches, per principal (exec_cache.go)
	events    *transport.Hub   // followers of GET /v1/events
	locks     fileop.Locks
	// moves keeps an agent's moves from racing its own walks: a move holds
	// it exclusively from its checks through its rename, a list or search
	// shared from its check that its directory is still where the
	// decision saw it through its walk. So no path beneath a walk changes
	// under it by a call, and a move's walk of a directory's entries sees
	// the tree its rename changes (docs/security.md, "what sluice itself
	// may rename").
	moves sync.RWMutex
	// stopCalls ends every call's context with errShutdown.
	stopCalls context.CancelCauseFunc
	// drops rate limits decision records of unmapped uids (ratelimit.go).
	drops *admission.DropLimiter
	// budgets are the principals' rates and denial budgets (budget.go).
	budgets *admission.Limiter
	// tokens are the delegation tokens minted here (tokens.go).
	tokens *tokenStore
}

// openLedger opens the audit ledger; tests wrap it to inject faults.
var openLedger = audit.OpenWith

// Run starts sluiced and serves until ctx is done, then shuts down
// gracefully (see shutdown).
func Run(ctx context.Context, cfg Config) error {
	cfg.setDefaults()
	// libcontainer takes only absolute rootfs paths: a relative --run-dir
	// failed every container ("invalid rootfs"), and a relative dir named
	// in logs and locks says less than its absolute path.
	for _, p := range []*string{&cfg.RunDir, &cfg.StateDir} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	d := &Daemon{cfg: cfg, log: cfg.Logger, slots: admission.NewSlots(cfg.MaxContainers)}
	d.slots.Queued = cfg.slotQueued
	base, stopCalls := context.WithCancelCause(context.Background())
	defer stopCalls(nil)
	d.calls, d.stopCalls = newRegistry(base, cfg.TaskTTL), stopCalls
	d.approvals = newApprovals(cfg.MaxParked, cfg.approvalClock)
	d.caches = newCacheSet()
	d.events = transport.NewHub()
	d.tokens = newTokenStore(cfg.tokenNow)
	if cfg.Manifest == "" {
		return errors.New("no manifest: pass --manifest FILE")
	}
	if cfg.MetricsListen != "" {
		if err := checkMetricsAddr(cfg.MetricsListen, cfg.InsecureMetricsAnyAddr); err != nil {
			return err
		}
		d.m = newMetrics(d)
	}
	transport.RaiseNofile(d.log)
	// Fewer wake-ups of the Go runtime's sysmon on the vCPU serving a
	// call; containers go back to the default (internal/timerslack).
	if err := timerslack.SetProcess(timerslack.Daemon); err != nil {
		d.log.Debug("timer slack unchanged", "err", err)
	}
	// A manifest that does not parse is reported as such, before the
	// locks below can refuse it for a dir another daemon holds.
	if err := checkManifest(cfg.Manifest); err != nil {
		return err
	}
	// One daemon per run dir and state dir, locked before anything in them
	// is read, swept or mounted: a second daemon must change nothing.
	locks, err := transport.LockDirs([2]string{"run dir", cfg.RunDir}, [2]string{"state dir", cfg.StateDir})
	if err != nil {
		return err
	}
	defer transport.UnlockAll(locks)
	d.setupCgroups()
	defer d.closeRunner()
	pol, err := loadPolicyWith(cfg.Manifest, cfg.ResolveMode, d.log, d.getRunner)
	if err != nil {
		return err
	}
	d.pol = pol
	d.budgets = admission.NewLimiter()
	d.configureBudgets(pol.m)
	// Until it serves, a return closes the policy's pools and views here,
	// or closeRunner would wait for them forever; serving, Run's own
	// returns do.
	serving := false
	defer func() {
		if !serving {
			d.closePolicy()
		}
	}()
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	closeSpill, err := d.approvals.openSpill(cfg.StateDir, d.log)
	if err != nil {
		return err
	}
	defer closeSpill()
	ledgerPath := filepath.Join(cfg.StateDir, "audit.jsonl")
	// Set on a clean stop (every call ended): after the ledger is closed,
	// a marker lets the next start skip the interrupted-write scan.
	cleanStop := false
	defer func() {
		if cleanStop {
			if err := recovery.WriteCleanStop(cfg.StateDir, ledgerPath); err != nil {
				d.log.Warn("could not write the clean-stop marker; the next start scans the ledger", "err", err)
			}
		}
	}()
	ledger, rec, err := openLedger(ledgerPath, audit.Options{Logger: d.log})
	if err != nil {
		return err
	}
	defer ledger.Close()
	d.ledger = meteredLedger{Ledger: ledger, m: d.m}
	d.drops = admission.NewDropLimiter(d.auditDropped)
	defer d.drops.Close() // before the ledger closes
	if rec.CutBytes > 0 {
		d.log.Warn("audit ledger had a torn last record; cut it", "bytes", rec.CutBytes, "after_seq", rec.LastSeq)
	}
	// Before the start record: the next start's scan stops at it.
	if err := d.recoverWrites(pol.base, ledgerPath); err != nil {
		return err
	}
	if err := d.auditPolicy(pol, "start"); err != nil {
		return err
	}

	conns := transport.NewConns(cfg.MaxConns, cfg.MaxConnsPerUID, d.log)
	d.conns = conns // before the metrics server reads it
	var metricsSrv *http.Server
	if d.m != nil {
		if metricsSrv, err = d.serveMetrics(); err != nil {
			return err
		}
		defer stopMetrics(metricsSrv)
	}
	ln, activated, err := d.listen()
	if err != nil {
		return err
	}
	handler := d.routes()
	d.mcp = mcphost.New(handler, cfg.Socket, cfg.MaxConnsPerUID, cfg.WriteTimeout, d.log)
	srv := &http.Server{
		Handler:           handler,
		ConnContext:       transport.ConnContext,
		ConnState:         conns.ConnState,
		ReadHeaderTimeout: cfg.ReadTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    32 << 10,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelDebug),
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	serving = true
	serveErr := make(chan error, 1)
	go func() {
		serveErr <- srv.Serve(conns.Listener(ln))
	}()
	d.log.Info("sluiced ready", "socket", ln.Addr().String(), "socket_activated", activated, "manifest", pol.path,
		"policy_version", pol.m.Version, "audit", ledger.Path(), "resolver", pol.base.Mode().String(),
		"cgroups", d.cgroups.String())
	if cfg.ResolveMode == securefs.ModeAuto && pol.base.Mode() == securefs.ModeFallback {
		// Every kernel sluiced runs on has openat2 (5.6; the mount setup
		// needs 5.12): ENOSYS means a seccomp filter took it away.
		d.log.Warn("openat2 returned ENOSYS: a seccomp filter blocks it (systemd's RestrictSUIDSGID=yes does, and so does a SystemCallFilter= allow list that lacks it); " +
			"file tools fall back to the os.Root resolver and execute tools cannot set up their mounts")
	}
	if cfg.Ready != nil {
		cfg.Ready()
	}
	// READY=1 once the socket is served and the pools are warm (bounded),
	// so the first execute calls after start are not cold. The wait must
	// not hold up SIGTERM or SIGHUP: it runs beside the loop.
	warmed := make(chan [2]int, 1)
	go func() {
		w, n := d.waitWarm(ctx, cfg.WarmTimeout)
		warmed <- [2]int{w, n}
	}()
	// systemctl status shows STATUS=; refresh it while under systemd.
	var statusTick <-chan time.Time
	if transport.UnderSystemd() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		statusTick = t.C
	}
	for {
		select {
		case wn := <-warmed:
			if wn[0] < wn[1] {
				d.log.Warn("pools not warm in time; serving, the first execute calls may start cold",
					"warm", wn[0], "pools", wn[1], "warm_timeout", cfg.WarmTimeout.String())
			} else if wn[1] > 0 {
				d.log.Info("pools warm", "pools", wn[1])
			}
			d.ready.Store(true)
			d.notify(transport.NotifyReady, d.status())
		case <-statusTick:
			d.notify(d.status())
		case <-hup:
			if _, err := d.reload(); err != nil {
				d.log.Error("reload refused; keeping the current manifest", "err", err)
			}
		case err := <-serveErr:
			d.closePolicy()
			return fmt.Errorf("serve: %w", err)
		case <-ctx.Done():
			d.notify(transport.NotifyStopping, "STATUS=stopping: calls in flight get --shutdown-grace")
			st := ledger.Stats()
			_, evicted, refused := conns.Stats()
			d.log.Info("shutting down", "audit_records", st.Records, "audit_syncs", st.Syncs,
				"conns_evicted", evicted, "conns_refused", refused, "calls_in_flight", d.calls.inFlight())
			d.shutdown(srv)
			d.closePolicy()
			cleanStop = d.calls.inFlight() == 0
			return nil
		}
	}
}

// shutdown stops accepting at once, lets calls in flight finish for up to
// the grace, then ends the rest with cause errShutdown: their commands are
// killed and each gets a result (event and ledger record) with reason
// shutdown. Only after every handler has returned does Run close the
// ledger. The whole stop takes at most grace + 2 s.
func (d *Daemon) shutdown(srv *http.Server) {
	d.events.Close() // event streams end now, so their connections go idle
	served := make(chan struct{})
	go func() {
		// Closes the listener now; returns once every connection is idle.
		sctx, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownGrace+2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		close(served)
	}()
	// Attached MCP sessions stop reading now and are handed back to
	// their `sluice mcp` once their calls end (daemon/mcphost).
	ended := make(chan struct{})
	go func() { d.mcp.Close(); close(ended) }()
	gctx, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownGrace)
	drained := d.calls.wait(gctx)
	cancel()
	if !drained {
		d.log.Warn("shutdown grace over; ending calls still in flight", "calls", d.calls.inFlight(), "grace", d.cfg.ShutdownGrace.String())
		d.stopCalls(errShutdown)
		wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if !d.calls.wait(wctx) {
			d.log.Error("calls did not end within 2 s of being told to", "calls", d.calls.inFlight())
		}
		cancel()
	}
	select {
	case <-served:
	case <-time.After(2 * time.Second):
	}
	select {
	case <-ended:
	case <-time.After(2 * time.Second):
		d.log.Warn("mcp sessions not handed back within 2 s of the calls' end", "sessions", d.mcp.Sessions())
	}
	srv.Close()
}

// getRunner makes the sandbox runner on first need, sweeping what a crash
// left in its run dir.
func (d *Daemon) getRunner() (*sandbox.Runner, error) {
	d.runnerMu.Lock()
	defer d.runnerMu.Unlock()
	if d.runner != nil {
		return d.runner, nil
	}
	r, err := sandbox.NewRunnerWith(d.cfg.RunDir, d.cfg.Helper, d.log, sandbox.Options{IDs: d.cfg.UIDRange, Cgroups: d.cgroups, Init: d.cfg.Init})
	if err != nil {
		return nil, err // not latched: a later reload may succeed
	}
	if n, err := r.Sweep(); err != nil {
		d.log.Warn("sandbox sweep incomplete", "removed", n, "err", err)
	} else if n > 0 {
		d.log.Warn("removed sandbox leftovers from an earlier run", "count", n)
	}
	d.runner = r
	return r, nil
}

// setupCgroups computes the containers' cgroup layout once: under a
// delegating systemd service on cgroup v2, sluiced moves itself into the
// leaf SERVICE/daemon and containers go beside it (see
// sandbox.SetupCgroups). A failure keeps the layout outside systemd.
func (d *Daemon) setupCgroups() {
	l, warning, err := sandbox.SetupCgroups()
	if err != nil {
		d.log.Warn("cgroup setup under systemd failed; containers' cgroups go to /sluice", "err", err)
	} else if warning != "" {
		d.log.Warn(warning)
	}
	d.cgroups = l
}

func (d *Daemon) closeRunner() {
	d.runnerMu.Lock()
	defer d.runnerMu.Unlock()
	if d.runner != nil {
		d.runner.Close()
	}
	d.caches.closeAll()
}

func (d *Daemon) closePolicy() {
	d.mu.Lock()
	p := d.pol
	d.mu.Unlock()
	p.retire()
}

// acquire returns the current policy, held until release.
func (d *Daemon) acquire() *policy {
	d.mu.RLock()
	p := d.pol
	p.users.Add(1)
	d.mu.RUnlock()
	return p
}

// reload loads the manifest again and swaps it in atomically. An invalid
// manifest leaves the current one in force.
func (d *Daemon) reload() (*policy, error) {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	if d.ready.Load() {
		// systemd shows the unit "reloading" until READY=1 comes back.
		d.notify(transport.NotifyReloading, transport.MonotonicUsec())
		defer func() { d.notify(transport.NotifyReady, d.status()) }()
	}
	np, err := loadPolicyWith(d.cfg.Manifest, d.cfg.ResolveMode, d.log, d.getRunner)
	if err == nil {
		if err = d.auditPolicy(np, "reload"); err != nil {
			np.close()
		}
	}
	d.m.reloaded(err)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	old := d.pol
	d.pol = np
	d.mu.Unlock()
	d.configureBudgets(np.m)
	old.retire()
	d.log.Info("manifest reloaded", "policy_version", np.m.Version, "previous", old.m.Version)
	d.events.Publish(api.DaemonEvent{Event: api.DaemonEventPolicyLoaded, PolicyVersion: np.m.Version})
	return np, nil
}

func (d *Daemon) auditPolicy(p *policy, why string) error {
	err := d.ledger.AppendSync(&audit.Record{
		Kind:          audit.KindPolicyLoaded,
		PolicyVersion: p.m.Version,
		Detail:        why + ": " + p.path,
	})
	if err != nil {
		return fmt.Errorf("audit policy_loaded: %w", err)
	}
	return nil
}

// checkManifest reads and parses the manifest without acting on it (no
// root is opened, no view mounted), as loadPolicyWith will again once the
// dirs are locked.
func checkManifest(manifestPath string) error {
	abs, err := filepath.Abs(manifestPath)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return fmt.Errorf("read manifest: %w", err)
	}
	_, err = authz.ParseFile(abs, bytes.NewReader(data), filepath.Dir(abs))
	return err
}
