// Command sluiced is the sluice daemon. It parses flags into a
// daemon.Config and runs it until SIGTERM or SIGINT; SIGHUP reloads the
// manifest. All behaviour lives in package daemon.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/daemon"
	"github.com/sluicehq/sluice/sandbox"
)

// sandbox re-executes this binary to compile seccomp profiles: catch it
// before flags are parsed. (A container's init is sluice-init: --init.)
func init() { sandbox.MaybeInit() }

func main() {
	var cfg daemon.Config
	fs := flag.NewFlagSet("sluiced", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `sluiced — authorizes AI agents' tool calls, runs them contained, audits them.

Usage: sluiced --manifest FILE [--socket PATH] [--state-dir DIR] [--run-dir DIR]
               [--helper PATH] [--init PATH] [--uid-range START-END] [--max-containers N]
               [--queue-timeout D] [--max-conns-per-uid N] [--max-parked N]
               [--shutdown-grace D]
               [--task-ttl D] [--warm-timeout D] [--metrics-listen ADDR]
               [--min-free SIZE] [--log-level LEVEL]
       sluiced --check --manifest FILE
       sluiced --version

Serves HTTP/1.1 on a unix socket; the caller's identity is the socket's peer
credentials. SIGHUP reloads the manifest (an invalid one is refused and the
current one stays); SIGTERM shuts down gracefully.

At most --max-containers commands run at once; an execute call over the cap
waits its turn (first come, first served; not counted in its timeout_ms) for
up to --queue-timeout, then ends with reason "busy". A peer uid may hold
--max-conns-per-uid connections (1024 in all); at a cap the connection idle
the longest is closed to admit a new one, and one with a request in flight
never is. A principal may have --max-parked calls waiting for approval at
once; one more is denied with reason "busy".

Under systemd (scripts/sluiced.service, sluiced.socket) sluiced serves the
socket systemd passes (socket activation) instead of binding --socket, tells
systemd READY=1 once it serves and its warm pools have their first
containers (at most --warm-timeout later), and logs to stderr, which
systemd sends to the journal.

--check loads and validates the manifest as a start would (parse and
validation, base and every root opened beneath it, no write root that
reaches a policy file, execute tools' mounts resolved) and exits
without serving: 0 with a one-line summary, 1 with the error. It starts
no sandbox: the checks that need it (cgroups, user namespaces, seccomp,
the idmapped-tmpfs probe for caches, warm containers) run at start.

--version prints the release and the VCS revision the binary was built
from (as the go command stamps it), and exits.

--metrics-listen 127.0.0.1:9464 serves Prometheus metrics at /metrics
(off by default). Only a loopback address is accepted: the metrics have no
authentication and show which tools agents call, how often and what was
denied. --insecure-metrics-any-addr lifts that.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Manifest, "manifest", "", "manifest file (schema_version 1): JSON, or TOML when it ends in .toml; required")
	fs.StringVar(&cfg.Socket, "socket", api.DefaultSocket, "unix socket to listen on")
	fs.StringVar(&cfg.StateDir, "state-dir", daemon.DefaultStateDir, "state directory; the audit ledger is STATE_DIR/audit.jsonl")
	fs.StringVar(&cfg.RunDir, "run-dir", daemon.DefaultRunDir, "sandbox run directory: container state, rootfs dirs, a minimal /etc per container uid")
	fs.StringVar(&cfg.Helper, "helper", "", "sluice-helper binary for execute tools (default: beside sluiced)")
	fs.StringVar(&cfg.Init, "init", "", "sluice-init binary, every container's init: root's, writable by no one else, through root-owned directories (default: beside the helper)")
	fs.IntVar(&cfg.MaxContainers, "max-containers", daemon.DefaultMaxContainers(), "containers running commands at once; 4 per CPU by default")
	fs.DurationVar(&cfg.QueueTimeout, "queue-timeout", daemon.DefaultQueueTimeout, "how long an execute call over --max-containers waits before it ends busy")
	fs.IntVar(&cfg.MaxParked, "max-parked", daemon.DefaultMaxParked, "calls one principal may have waiting for approval at once; beyond it a call is denied busy")
	fs.IntVar(&cfg.MaxConnsPerUID, "max-conns-per-uid", daemon.DefaultMaxConnsPerUID, "open connections one peer uid may hold")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", daemon.DefaultShutdownGrace, "on SIGTERM, how long calls in flight may finish before they are ended with reason shutdown")
	fs.DurationVar(&cfg.TaskTTL, "task-ttl", daemon.DefaultTaskTTL, "how long a cancelled task stays cancelled (its new calls are denied)")
	fs.DurationVar(&cfg.WarmTimeout, "warm-timeout", daemon.DefaultWarmTimeout, "at start, how long to wait for the warm pools' first containers before telling systemd READY=1 anyway")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "", "serve Prometheus metrics at http://`ADDR`/metrics (HOST:PORT, loopback only, e.g. 127.0.0.1:9464); off when empty")
	fs.BoolVar(&cfg.InsecureMetricsAnyAddr, "insecure-metrics-any-addr", false, "allow --metrics-listen on a non-loopback address (the metrics are unauthenticated)")
	cfg.UIDRange = sandbox.DefaultIDRange
	fs.Var(&cfg.MinFree, "min-free", "free space a write must leave on its file system: bytes (`SIZE` like 512M, 2G), a percentage (5%) or 0 (off); the default is 5% or 1G, whichever is smaller; a write below it ends no_space before it starts")
	fs.Var(&cfg.UIDRange, "uid-range", "containers run as host uids (gid = uid) from `START-END`, inclusive, decimal or 0x hex: one per live container, never a host account's")
	level := fs.String("log-level", "info", "debug, info, warn or error (JSON logs on stderr)")
	check := fs.Bool("check", false, "load and validate --manifest as a start would, print a summary and exit (0 valid, 1 not); serves nothing")
	version := fs.Bool("version", false, "print the version and VCS revision, and exit")
	fs.Parse(os.Args[1:])
	if *version && fs.NArg() == 0 {
		fmt.Println("sluiced", api.BuildVersion())
		return
	}
	if cfg.Manifest == "" || fs.NArg() > 0 {
		fs.Usage()
		os.Exit(2)
	}
	if cfg.MaxContainers < 1 || cfg.QueueTimeout <= 0 || cfg.MaxConnsPerUID < 1 || cfg.MaxParked < 1 || cfg.ShutdownGrace <= 0 || cfg.TaskTTL <= 0 || cfg.WarmTimeout <= 0 {
		fmt.Fprintln(os.Stderr, "sluiced: --max-containers, --queue-timeout, --max-conns-per-uid, --max-parked, --shutdown-grace, --task-ttl and --warm-timeout must be positive")
		os.Exit(2)
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "sluiced: --log-level: %v\n", err)
		os.Exit(2)
	}
	if *check {
		// Warnings (a missing root, an approver who may approve its own
		// calls) as readable lines.
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: max(lv, slog.LevelWarn)}))
		s, err := daemon.Check(cfg.Manifest, log)
		if err != nil {
			fmt.Fprintf(os.Stderr, "sluiced: %v\n", err)
			os.Exit(1)
		}
		fmt.Println(s)
		return
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "sluiced: %v\n", err)
		os.Exit(1)
	}
}
