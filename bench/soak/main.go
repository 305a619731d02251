//go:build linux

// Command soak holds a real sluiced under load over its real unix socket
// and prints one row per scenario with pass or fail; it exits 1 when any
// row fails (docs/testing.md "make soak"):
//
//  1. mixed: N mixed calls from 8 clients; no unexpected result; fds,
//     goroutines and RSS flat after warm-up; the ledger verifies.
//  2. kill: SIGKILL with 50 calls in flight; every client gets an error;
//     the restart sweeps every container, cgroup and mount; the ledger
//     verifies and explains every result.
//  3. conns: 1,000 idle connections and slowloris clients; new clients
//     served within 100 ms.
//  4. auditfull: the ledger's tmpfs fills under load; calls run only while
//     recorded (on the reserve), then are denied audit_unavailable; with
//     space back the daemon serves again and the ledger verifies.
//
// It runs as root (containers, cgroups, tmpfs, other uids' connections).
// Everything it makes lives under one temp dir and is removed at exit,
// also on failure or SIGINT.
//
//	soak --bin bin [--calls 10000] [--only 1,2,3,4]
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/sandbox"
)

// knobs, from flags whose defaults come from SOAK_* variables.
var (
	binDir     string
	nCalls     int
	nClients   int
	nInflight  int
	nIdle      int
	nSlow      int
	nNewConns  int
	serveLimit time.Duration
	keep       bool
	verbose    bool
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envStr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	flag.StringVar(&binDir, "bin", "bin", "directory holding sluiced, sluice, sluice-helper and sluice-init")
	flag.IntVar(&nCalls, "calls", envInt("SOAK_CALLS", 10000), "row 1: mixed calls in all ($SOAK_CALLS)")
	flag.IntVar(&nClients, "clients", envInt("SOAK_CLIENTS", 8), "rows 1 and 4: concurrent clients ($SOAK_CLIENTS)")
	flag.IntVar(&nInflight, "inflight", envInt("SOAK_INFLIGHT", 50), "row 2: calls in flight when sluiced is killed ($SOAK_INFLIGHT)")
	flag.IntVar(&nIdle, "idle", envInt("SOAK_IDLE", 1000), "row 3: idle connections ($SOAK_IDLE)")
	flag.IntVar(&nSlow, "slowloris", envInt("SOAK_SLOWLORIS", 16), "row 3: slowloris clients ($SOAK_SLOWLORIS)")
	flag.IntVar(&nNewConns, "new", envInt("SOAK_NEW", 200), "row 3: new clients timed ($SOAK_NEW)")
	serveMS := flag.Int("serve-ms", envInt("SOAK_SERVE_MS", 100), "row 3: p95 of a new client's dial to result, at most, in ms ($SOAK_SERVE_MS)")
	only := flag.String("only", envStr("SOAK_ONLY", "1,2,3,4"), "rows to run, e.g. 1,3 ($SOAK_ONLY)")
	flag.BoolVar(&keep, "keep", os.Getenv("SOAK_KEEP") == "1", "keep the work dir (and daemon logs) after a run ($SOAK_KEEP=1)")
	flag.BoolVar(&verbose, "v", os.Getenv("SOAK_VERBOSE") == "1", "print progress details ($SOAK_VERBOSE=1)")
	flag.Parse()
	serveLimit = time.Duration(*serveMS) * time.Millisecond
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "soak: run as root (containers, cgroups, tmpfs, other uids' connections)")
		os.Exit(2)
	}
	abs, err := filepath.Abs(binDir)
	if err != nil {
		fatal(err)
	}
	binDir = abs
	for _, b := range []string{"sluiced", "sluice", "sluice-helper", "sluice-init"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			fmt.Fprintf(os.Stderr, "soak: %v (make build first)\n", err)
			os.Exit(2)
		}
	}
	raiseNofile()

	root, err := os.MkdirTemp("/var/tmp", "sluice-soak-")
	if err != nil {
		fatal(err)
	}
	os.Chmod(root, 0o755) // container uids traverse it to their mounts
	workRoot = root
	atExit(func() { removeWork(root) })

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "\nsoak: %v: cleaning up\n", s)
		runCleanups()
		os.Exit(130)
	}()

	rows := []struct {
		id   string
		name string
		fn   func(dir string) row
	}{
		{"1", "mixed", scenarioMixed},
		{"2", "kill", scenarioKill},
		{"3", "conns", scenarioConns},
		{"4", "auditfull", scenarioAuditFull},
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		want[strings.TrimSpace(s)] = true
	}
	var results []row
	began := time.Now()
	for _, r := range rows {
		if !want[r.id] && !want[r.name] {
			continue
		}
		dir := filepath.Join(root, r.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fatal(err)
		}
		fmt.Printf("== %s. %s\n", r.id, r.name)
		t := time.Now()
		res := runRow(r.fn, dir)
		res.id, res.name, res.took = r.id, r.name, time.Since(t)
		results = append(results, res)
		status := "PASS"
		if !res.ok() {
			status = "FAIL"
		}
		fmt.Printf("   %s in %.1f s\n", status, res.took.Seconds())
	}
	failed := printTable(results, time.Since(began))
	runCleanups()
	if failed {
		os.Exit(1)
	}
}

// row is one scenario's outcome: what it measured (notes) and what went
// wrong (fails; none is a pass).
type row struct {
	id, name string
	took     time.Duration
	notes    []string
	fails    []string
}

func (r *row) ok() bool { return len(r.fails) == 0 }

func (r *row) note(format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	r.notes = append(r.notes, s)
	fmt.Println("   " + s)
}

func (r *row) fail(format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	r.fails = append(r.fails, s)
	fmt.Println("   FAIL: " + s)
}

// check fails the row with what when err is not nil.
func (r *row) check(err error, what string) bool {
	if err != nil {
		r.fail("%s: %v", what, err)
		return false
	}
	return true
}

// runRow runs fn, turning a panic into a failed row, and always runs the
// cleanups fn registered.
func runRow(fn func(string) row, dir string) (res row) {
	mark := cleanupMark()
	defer func() {
		if p := recover(); p != nil {
			res.fails = append(res.fails, fmt.Sprintf("panic: %v\n%s", p, debug.Stack()))
			fmt.Printf("   FAIL: panic: %v\n", p)
		}
		runCleanupsTo(mark)
	}()
	return fn(dir)
}

func printTable(results []row, took time.Duration) bool {
	failed := false
	fmt.Printf("\nsoak: %d rows in %.0f s (calls %d, clients %d)\n", len(results), took.Seconds(), nCalls, nClients)
	fmt.Printf("%-3s %-10s %-5s %8s  %s\n", "#", "scenario", "", "seconds", "figures")
	for _, r := range results {
		status := "pass"
		if !r.ok() {
			status = "FAIL"
			failed = true
		}
		first := ""
		if len(r.notes) > 0 {
			first = r.notes[0]
		}
		fmt.Printf("%-3s %-10s %-5s %8.1f  %s\n", r.id, r.name, status, r.took.Seconds(), first)
		for _, n := range r.notes[min(1, len(r.notes)):] {
			fmt.Printf("%-28s  %s\n", "", n)
		}
		for _, f := range r.fails {
			fmt.Printf("%-28s  FAIL: %s\n", "", f)
		}
	}
	if len(results) == 0 {
		fmt.Println("soak: no rows selected")
		return true
	}
	return failed
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "soak: %v\n", err)
	runCleanups()
	os.Exit(1)
}

// Cleanups run last first: at the end of the row that registered them,
// at exit, and on SIGINT or SIGTERM.
var (
	cleanMu  sync.Mutex
	cleanups []func()
	workRoot string
)

func atExit(fn func()) {
	cleanMu.Lock()
	cleanups = append(cleanups, fn)
	cleanMu.Unlock()
}

func cleanupMark() int {
	cleanMu.Lock()
	defer cleanMu.Unlock()
	return len(cleanups)
}

func runCleanupsTo(mark int) {
	for {
		cleanMu.Lock()
		if len(cleanups) <= mark {
			cleanMu.Unlock()
			return
		}
		fn := cleanups[len(cleanups)-1]
		cleanups = cleanups[:len(cleanups)-1]
		cleanMu.Unlock()
		fn()
	}
}

func runCleanups() { runCleanupsTo(0) }

// removeWork removes the work dir unless a mount is still visible under
// it (then removing could reach into what is mounted there: it is named
// instead) or --keep.
func removeWork(root string) {
	if mps := mountsUnder(root); len(mps) > 0 {
		fmt.Fprintf(os.Stderr, "soak: mounts left under %s, not removing it: %v\n", root, mps)
		return
	}
	if keep {
		fmt.Fprintf(os.Stderr, "soak: kept %s\n", root)
		return
	}
	os.RemoveAll(root)
}

// mountsUnder lists the mount points at or below dir in this mount
// namespace, from /proc/self/mountinfo.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []string{"read mountinfo: " + err.Error()}
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

func unescapeMount(s string) string {
	return regexp.MustCompile(`\\[0-7]{3}`).ReplaceAllStringFunc(s, func(m string) string {
		n, _ := strconv.ParseUint(m[1:], 8, 8)
		return string(rune(n))
	})
}

func raiseNofile() {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	}
}

func nofile() uint64 {
	var lim unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	return lim.Cur
}

// ---- the daemon ----

type daemon struct {
	name     string
	manifest string
	socket   string
	state    string
	run      string
	extra    []string

	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	log     *syncBuffer
	metrics string // host:port of --metrics-listen
	c       *client.Client
}

func newDaemon(dir, manifest string, extra ...string) *daemon {
	d := &daemon{name: filepath.Base(dir), manifest: manifest, socket: filepath.Join(dir, "s.sock"),
		state: filepath.Join(dir, "state"), run: filepath.Join(dir, "run"), extra: extra}
	// Whatever happens to the row, the daemon is stopped and what its
	// containers left is swept before the work dir goes.
	atExit(d.cleanup)
	return d
}

var metricsLine = regexp.MustCompile(`"msg":"serving metrics","addr":"http://([^/"]+)/metrics"`)

// start runs sluiced and returns once it serves /v1/health and its
// metrics address is known.
func (d *daemon) start() error {
	d.log = &syncBuffer{}
	d.metrics = ""
	args := append([]string{"--manifest", d.manifest, "--socket", d.socket, "--state-dir", d.state,
		"--run-dir", d.run, "--metrics-listen", "127.0.0.1:0", "--log-level", "info"}, d.extra...)
	d.cmd = exec.Command(filepath.Join(binDir, "sluiced"), args...)
	d.cmd.Stderr = d.log
	// and to a file beside the row's dirs, kept with --keep; open until
	// the daemon has exited (a closed stderr would SIGPIPE it)
	lf, err := os.OpenFile(filepath.Join(filepath.Dir(d.run), "sluiced.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	d.cmd.Stderr = io.MultiWriter(d.log, lf)
	if err := d.cmd.Start(); err != nil {
		lf.Close()
		return err
	}
	d.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		d.waitErr = cmd.Wait()
		lf.Close()
		close(exited)
	}(d.cmd, d.exited)
	d.c = client.New(d.socket)
	err = poll(60*time.Second, func() error {
		select {
		case <-d.exited:
			return stop(fmt.Errorf("sluiced exited: %v\n%s", d.waitErr, tail(d.log.String(), 2000)))
		default:
		}
		if d.metrics == "" {
			m := metricsLine.FindStringSubmatch(d.log.String())
			if m == nil {
				return errors.New("no metrics address logged yet")
			}
			d.metrics = m[1]
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := d.c.Health(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("sluiced not ready: %w", err)
	}
	return nil
}

func (d *daemon) running() bool {
	if d.cmd == nil {
		return false
	}
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// stop sends SIGTERM and waits (bounded) for the exit; it then kills.
func (d *daemon) stop() error {
	if !d.running() {
		return nil
	}
	d.c.Close()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
		return errors.New("sluiced ignored SIGTERM for 30 s: killed")
	}
	if d.waitErr != nil {
		return fmt.Errorf("sluiced exited: %v\n%s", d.waitErr, tail(d.log.String(), 2000))
	}
	return nil
}

// kill SIGKILLs sluiced and waits for it.
func (d *daemon) kill() {
	if !d.running() {
		return
	}
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
}

// cleanup stops the daemon and, when its containers left anything (it was
// killed, or a row failed midway), starts it once more on the same dirs so
// that its start-up sweep removes it, and stops it again.
func (d *daemon) cleanup() {
	if d.running() {
		if err := d.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "soak: %s: %v\n", d.name, err)
		}
	}
	if left := sandbox.Leftovers(d.run); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "soak: %s: sweeping %d leftovers by a restart\n", d.name, len(left))
		if err := d.start(); err == nil {
			d.stop()
		}
		if left := sandbox.Leftovers(d.run); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "soak: %s: still left after a sweep: %v\n", d.name, left)
		}
	}
}

// scopeDirs lists the cgroup dirs of the run dir's scope that exist, in
// every hierarchy (v1 and v2): sluice/<first 4 bytes of sha256(run dir)>,
// as sandbox names them outside systemd.
func (d *daemon) scopeDirs() []string {
	sum := sha256.Sum256([]byte(filepath.Clean(d.run)))
	scope := hex.EncodeToString(sum[:4])
	var out []string
	for _, pat := range []string{"/sys/fs/cgroup/*/sluice/" + scope, "/sys/fs/cgroup/sluice/" + scope} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return out
}

// checkClean: after the daemon stopped, nothing of its containers is
// left: no process, cgroup, mount or rootfs dir (sandbox.Leftovers, read
// from the kernel), no mount under the row's dir but ours (the row's own
// tmpfs), no cgroup scope dir.
func (d *daemon) checkClean(r *row, dir string, ours ...string) {
	left := sandbox.Leftovers(d.run)
	for _, m := range mountsUnder(dir) {
		if !slices.Contains(ours, m) {
			left = append(left, "mount "+m)
		}
	}
	left = append(left, d.scopeDirs()...)
	if len(left) > 0 {
		r.fail("left after the daemon stopped: %v", left)
	}
}

func (d *daemon) ledger() string { return filepath.Join(d.state, "audit.jsonl") }

// verify runs `sluice audit verify` on the ledger (the daemon stopped).
func (d *daemon) verify() (string, error) {
	out, err := exec.Command(filepath.Join(binDir, "sluice"), "audit", "verify", d.ledger()).CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("sluice audit verify: %v: %s", err, s)
	}
	return s, nil
}

// scrape reads the daemon's Prometheus metrics: "name" or
// "name{labels}" → value.
func (d *daemon) scrape() (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.metrics+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// quiet waits until no call is in flight, no container slot is held,
// every pool is full and (when conns) no client connection is open.
func (d *daemon) quiet(conns bool) error {
	if conns {
		d.c.Close()
	}
	return poll(60*time.Second, func() error {
		m, err := d.scrape()
		if err != nil {
			return err
		}
		if v := m["sluice_calls_in_flight"]; v != 0 {
			return fmt.Errorf("%v calls in flight", v)
		}
		if v := m["sluice_containers_running"]; v != 0 {
			return fmt.Errorf("%v containers running", v)
		}
		if v := m["sluice_connections_open"]; conns && v != 0 {
			return fmt.Errorf("%v connections open", v)
		}
		pooled := 0
		for k, size := range m {
			if tool, ok := strings.CutPrefix(k, "sluice_pool_size"); ok {
				if ready := m["sluice_pool_ready"+tool]; ready != size {
					return fmt.Errorf("pool %s: %v of %v ready", tool, ready, size)
				}
				pooled += int(size)
			}
		}
		// and the containers that ran calls are destroyed (that runs in
		// the background, holding fds until it is done)
		if n := sandbox.Containers(d.run); n != pooled {
			return fmt.Errorf("%d containers, %d pooled", n, pooled)
		}
		return nil
	})
}

// usage is what sluiced holds: open fds, goroutines, resident memory.
type usage struct {
	fds, goroutines int
	rssKiB          int64
	fdLinks         map[string]int // what the fds name → how many
}

// fdsAdded names what u holds more of than before.
func (u usage) fdsAdded(before usage) []string {
	var out []string
	for l, n := range u.fdLinks {
		if n > before.fdLinks[l] {
			out = append(out, fmt.Sprintf("%s ×%d", l, n-before.fdLinks[l]))
		}
	}
	sort.Strings(out)
	return out
}

func (u usage) String() string {
	return fmt.Sprintf("fds %d, goroutines %d, RSS %.1f MiB", u.fds, u.goroutines, float64(u.rssKiB)/1024)
}

func (d *daemon) usage() (usage, error) {
	var u usage
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.pid()))
	if err != nil {
		return u, err
	}
	u.fds = len(ents)
	u.fdLinks = map[string]int{}
	for _, e := range ents {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", d.pid(), e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if i := strings.IndexByte(l, '['); i > 0 { // socket:[123] → socket
			l = l[:i-1]
		}
		u.fdLinks[l]++
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.pid()))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			u.rssKiB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	m, err := d.scrape()
	if err != nil {
		return u, err
	}
	g, ok := m["go_goroutines"]
	if !ok {
		return u, errors.New("no go_goroutines in the metrics")
	}
	u.goroutines = int(g)
	return u, nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// ---- polling ----

// stopErr ends a poll at once with its error.
type stopErr struct{ error }

func stop(err error) error { return stopErr{err} }

// poll calls check until it returns nil or a stop error, or until timeout
// has passed (then the last error). Between tries it yields briefly: a
// bounded wait for a condition, never a sleep standing in for an event.
func poll(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		err := check()
		if err == nil {
			return nil
		}
		var se stopErr
		if errors.As(err, &se) {
			return se.error
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		time.Sleep(wait)
		wait = min(wait*2, 50*time.Millisecond)
	}
}

// ---- fixtures ----

// fixture is a base dir with ws/src (files to read, list and cat, and
// never-listed ones), ws/out (write targets) and a manifest.
type fixture struct {
	base     string
	files    map[string]string // name in ws/src → content
	listing  []string          // names list_dir of ws/src shows
	manifest string
}

func makeFixture(dir string, tools string) (*fixture, error) {
	fx := &fixture{base: filepath.Join(dir, "base"), files: map[string]string{}}
	src := filepath.Join(fx.base, "ws", "src")
	for _, d := range []string{src, filepath.Join(src, "sub"), filepath.Join(fx.base, "ws", "out")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	for i := range 16 {
		name := fmt.Sprintf("f%02d.txt", i)
		body := strings.Repeat(fmt.Sprintf("file %d line\n", i), 1+i*13)
		fx.files[name] = body
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			return nil, err
		}
		fx.listing = append(fx.listing, name)
	}
	fx.listing = append(fx.listing, "sub")
	sort.Strings(fx.listing)
	for name, body := range map[string]string{".env": "SOAK_SECRET=hunter2\n", "id.pem": "SOAK_SECRET pem\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			return nil, err
		}
	}
	fx.manifest = filepath.Join(dir, "manifest.json")
	bb, _ := json.Marshal(fx.base)
	m := `{"schema_version":1,"base":` + string(bb) + `,"tools":{` + tools + `}}`
	var check any
	if err := json.Unmarshal([]byte(m), &check); err != nil {
		return nil, fmt.Errorf("manifest: %w\n%s", err, m)
	}
	return fx, os.WriteFile(fx.manifest, []byte(m), 0o644)
}

// The tools the rows use: file tools on ws/src and ws/out, a command that
// cats a file through the view, and one that sleeps. The cat tool's pool
// has a fixed size (pool_max = pool): each waiting box holds ten fds (its
// namespaces, pipes, pidfd), so a pool growing toward its pool_max under
// the mixed load would read as fds growing; how pools grow and shrink is
// sandbox's TestPoolSizedByDemand, and quiet() checks that every
// container is a pooled one.
const (
	toolRead  = `"read_file":{"operation":"read","roots":["ws/src"],"never":[".env","*.pem"],"max_bytes":65536}`
	toolList  = `"list_dir":{"operation":"list","roots":["ws/src"],"never":[".env","*.pem"]}`
	toolWrite = `"write_file":{"operation":"write","roots":["ws/out"],"never":[".env","*.pem"],"max_bytes":65536}`
	toolCat   = `"cat":{"operation":"execute","commands":[["cat","f03.txt"]],"mounts":["ws/src"],"cwd":"ws/src","never":[".env","*.pem"],"timeout_ms":60000,"memory_mb":64,"pids":16,"pool":2,"pool_max":2}`
	toolSleep = `"sleeper":{"operation":"execute","commands":[["sleep","600"]],"mounts":["ws/src"],"cwd":"ws/src","timeout_ms":900000,"memory_mb":32,"pids":8,"pool":2}`
)

// ---- calls ----

// seenCall is a decided result a client received, for the ledger check.
type seenCall struct {
	id      string
	verdict api.Verdict
	reason  api.Reason
	ok      bool
}

// callRaw posts body and returns the status, the decided result (status
// 200) and the body.
func callRaw(ctx context.Context, c *client.Client, body []byte) (int, *api.CallResult, []byte, error) {
	code, b, err := c.CallRaw(ctx, body)
	if err != nil {
		return 0, nil, nil, err
	}
	if code != http.StatusOK {
		return code, nil, b, nil
	}
	var res api.CallResult
	if err := json.Unmarshal(b, &res); err != nil {
		return code, nil, b, fmt.Errorf("decode result: %w: %s", err, b)
	}
	return code, &res, b, nil
}

func callBody(tool string, args any) []byte {
	b, _ := json.Marshal(map[string]any{"tool": tool, "args": args})
	return b
}

// ---- the ledger ----

type ledgerRec struct {
	Seq     uint64          `json:"seq"`
	Kind    string          `json:"kind"`
	CallID  string          `json:"call_id"`
	Tool    string          `json:"tool"`
	Verdict string          `json:"verdict"`
	Reason  string          `json:"reason"`
	Args    json.RawMessage `json:"args"`
	Result  *struct {
		OK     bool   `json:"ok"`
		SHA256 string `json:"sha256"`
	} `json:"result"`
}

type ledgerCall struct {
	decision, result *ledgerRec
}

// ledgerReport reads a ledger and checks the rule that no result is
// recorded without its decision before it, and that every result a client
// received has its records: a decision (and, for an allowed call, its
// result). audit_unavailable results need none. It returns the calls by id
// and counts by kind.
func ledgerReport(path string, seen []seenCall) (map[string]*ledgerCall, map[string]int, []string) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, []string{err.Error()}
	}
	defer f.Close()
	calls := map[string]*ledgerCall{}
	kinds := map[string]int{}
	var probs []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r ledgerRec
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			probs = append(probs, fmt.Sprintf("ledger line not JSON: %v", err))
			continue
		}
		kinds[r.Kind]++
		if r.CallID == "" {
			continue
		}
		lc := calls[r.CallID]
		if lc == nil {
			lc = &ledgerCall{}
			calls[r.CallID] = lc
		}
		rec := r
		switch r.Kind {
		case "decision":
			if lc.decision != nil && lc.decision.Verdict != "pending" {
				probs = append(probs, fmt.Sprintf("call %s: two decisions (seq %d, %d)", r.CallID, lc.decision.Seq, r.Seq))
			}
			lc.decision = &rec
		case "result":
			if lc.decision == nil {
				probs = append(probs, fmt.Sprintf("call %s: result at seq %d without a decision before it", r.CallID, r.Seq))
			} else if lc.decision.Verdict != "allow" {
				probs = append(probs, fmt.Sprintf("call %s: result at seq %d after a %s decision", r.CallID, r.Seq, lc.decision.Verdict))
			}
			if lc.result != nil {
				probs = append(probs, fmt.Sprintf("call %s: two results", r.CallID))
			}
			lc.result = &rec
		}
	}
	if err := sc.Err(); err != nil {
		probs = append(probs, "read ledger: "+err.Error())
	}
	missing := 0
	for _, s := range seen {
		// audit_unavailable: a denial has no record (the decision could
		// not be written); an allowed call's decision was, its result not.
		if s.reason == api.ReasonAuditUnavailable {
			if s.verdict == api.VerdictAllow {
				if lc := calls[s.id]; lc == nil || lc.decision == nil || lc.decision.Verdict != "allow" {
					missing++
					if missing <= 5 {
						probs = append(probs, fmt.Sprintf("call %s (allow audit_unavailable) ran without its allowed decision record", s.id))
					}
				}
			}
			continue
		}
		lc := calls[s.id]
		var p string
		switch {
		case lc == nil || lc.decision == nil:
			p = fmt.Sprintf("call %s (%s %s) reached its client without a decision record", s.id, s.verdict, s.reason)
		case string(s.verdict) != lc.decision.Verdict:
			p = fmt.Sprintf("call %s: client saw %s, the ledger's decision is %s", s.id, s.verdict, lc.decision.Verdict)
		case s.verdict == api.VerdictAllow && lc.result == nil:
			p = fmt.Sprintf("call %s (allow %s) reached its client without a result record", s.id, s.reason)
		case s.verdict == api.VerdictAllow && string(s.reason) != lc.result.Reason:
			p = fmt.Sprintf("call %s: client saw %s, the ledger's result says %s", s.id, s.reason, lc.result.Reason)
		}
		if p != "" {
			missing++
			if missing <= 5 {
				probs = append(probs, p)
			}
		}
	}
	if missing > 5 {
		probs = append(probs, fmt.Sprintf("… %d calls in all lack their records", missing))
	}
	return calls, kinds, probs
}

// readAll drains and closes r (for raw HTTP).
func readAll(r io.ReadCloser) []byte {
	b, _ := io.ReadAll(io.LimitReader(r, 1<<20))
	r.Close()
	return b
}
