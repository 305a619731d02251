//go:build linux

// Command readbench measures read_file of a 4 KiB file through sluiced
// over its unix socket against, in the same run: the transport floor (a
// no-op HTTP server on a unix socket, in its own process, answering the
// same body), the durability floor (one append+fdatasync in the state
// dir), and spawning cat. It prints a table with ratios, then the goals
// table: each of the Performance issue's read-path goals, as the value or
// ratio it is stated in, and whether this run met it.
//
//	readbench --bin bin [--base DIR] [--n 3000] [--seconds 5] [--clients 1,2,4,8] [--writes N [--writes-only]]
//
// --writes N adds write_file overwrites of a 4 KiB file (N per daemon,
// interleaved) beside the floor of a durable atomic replace, with each
// daemon's CPU per call.
// --base runs a second sluiced (a baseline build) beside the first, its
// calls interleaved with the others', so that an A/B on a busy machine
// compares like with like.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
)

func main() {
	if len(os.Args) > 3 && os.Args[1] == "noop-server" {
		noopServer(os.Args[2], os.Args[3], "")
		return
	}
	if len(os.Args) > 4 && os.Args[1] == "noop-sync-server" {
		noopServer(os.Args[2], os.Args[3], os.Args[4])
		return
	}
	bin := flag.String("bin", "bin", "directory holding sluiced")
	base := flag.String("base", "", "directory holding a baseline sluiced, measured interleaved beside --bin (A/B)")
	n := flag.Int("n", 3000, "sequential calls per latency measurement")
	secs := flag.Float64("seconds", 4, "seconds per throughput measurement")
	clientsFlag := flag.String("clients", "1,2,4,8", "client counts for the throughput rows")
	work := flag.String("dir", "", "work dir on a real disk (default: a temp dir under /var/tmp)")
	writes := flag.Int("writes", 0, "also measure N sequential write_file overwrites of a 4 KiB file per daemon, interleaved, against the atomic-replace floor")
	writesOnly := flag.Bool("writes-only", false, "with --writes: skip the read rows")
	flag.Parse()
	if *work == "" {
		d, err := os.MkdirTemp("/var/tmp", "sluice-bench")
		check(err)
		defer os.RemoveAll(d)
		*work = d
	}
	var clientCounts []int
	for _, f := range strings.Split(*clientsFlag, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		check(err)
		clientCounts = append(clientCounts, k)
	}
	ws := filepath.Join(*work, "workspace", "src")
	check(os.MkdirAll(ws, 0o755))
	body := bytes.Repeat([]byte("0123456789abcde\n"), 256) // 4096 bytes
	file := filepath.Join(ws, "four_k.txt")
	check(os.WriteFile(file, body, 0o644))
	manifest := filepath.Join(*work, "manifest.json")
	check(os.WriteFile(manifest, []byte(`{"schema_version":1,"tools":{"read_file":{"operation":"read","roots":["workspace/src"]},"write_file":{"operation":"write","roots":["workspace/src"],"mode":"overwrite"}}}`), 0o644))

	// sluiced (and the baseline's), each with its own state dir on the
	// same disk
	type daemon struct {
		name, sock, state string
		cmd               *exec.Cmd
		c                 *client.Client
	}
	startDaemon := func(name, dir string) *daemon {
		sd := &daemon{name: name, sock: filepath.Join(*work, name+".sock"), state: filepath.Join(*work, name+"-state")}
		sd.cmd = exec.Command(filepath.Join(dir, "sluiced"), "--manifest", manifest, "--socket", sd.sock, "--state-dir", sd.state,
			"--run-dir", filepath.Join(*work, name+"-run"), "--log-level", "error")
		sd.cmd.Stderr = os.Stderr
		sd.cmd.SysProcAttr = dieWithUs
		check(sd.cmd.Start())
		sd.c = client.New(sd.sock)
		waitReady(func() error { _, err := sd.c.Health(context.Background()); return err })
		return sd
	}
	daemons := []*daemon{startDaemon("sluice", *bin)}
	if *base != "" {
		daemons = append(daemons, startDaemon("base", *base))
	}
	defer func() {
		for _, sd := range daemons {
			sd.cmd.Process.Signal(unix.SIGTERM)
			sd.cmd.Wait()
		}
	}()

	// no-op floor, its own process like sluiced
	noopSock := filepath.Join(*work, "noop.sock")
	self, _ := os.Executable()
	nsrv := exec.Command(self, "noop-server", noopSock, file)
	nsrv.Stderr = os.Stderr
	nsrv.SysProcAttr = dieWithUs
	check(nsrv.Start())
	defer func() { nsrv.Process.Kill(); nsrv.Wait() }()
	noop := client.New(noopSock)
	waitReady(func() error { _, err := noop.Health(context.Background()); return err })

	// the durable no-op: the same server, but each call appends a record
	// and waits for an fdatasync that covers it (shared by group commit),
	// as every sluice call must before its result leaves
	dsyncSock := filepath.Join(*work, "noop-sync.sock")
	dsrv := exec.Command(self, "noop-sync-server", dsyncSock, file, filepath.Join(daemons[0].state, "noop-sync.jsonl"))
	dsrv.Stderr = os.Stderr
	dsrv.SysProcAttr = dieWithUs
	check(dsrv.Start())
	defer func() { dsrv.Process.Kill(); dsrv.Wait() }()
	waitReady(func() error { _, err := client.New(dsyncSock).Health(context.Background()); return err })

	if *writes > 0 {
		var names []string
		var fns []func() error
		for _, sd := range daemons {
			names = append(names, sd.name)
			fns = append(fns, writeCall(sd.c, ws, sd.name+"-w.txt", body))
		}
		names = append(names, "floor: write+fsync, rename, fsync dir")
		fns = append(fns, replaceFloor(ws, body))
		for _, fn := range fns {
			for range 50 {
				check(fn())
			}
		}
		var cpu0 []time.Duration
		for _, sd := range daemons {
			cpu0 = append(cpu0, cpuTime(sd.cmd.Process.Pid))
		}
		lat := interleaved(*writes, fns...)
		fmt.Printf("\nwrite_file overwrite of a 4 KiB file, %d sequential calls each, interleaved (µs)\n", *writes)
		fmt.Printf("%-44s %9s %9s %9s %9s\n", "", "p50", "p95", "p99", "cpu/call")
		for i, name := range names {
			cpu := ""
			if i < len(daemons) {
				cpu = fmt.Sprintf("%9.0f", us(cpuTime(daemons[i].cmd.Process.Pid)-cpu0[i])/float64(*writes))
			}
			fmt.Printf("%-44s %9.0f %9.0f %9.0f %9s\n", name, us(pct(lat[i], 50)), us(pct(lat[i], 95)), us(pct(lat[i], 99)), cpu)
		}
		if *writesOnly {
			return
		}
	}

	req := api.CallRequest{Tool: "read_file", Args: json.RawMessage(`{"path":"workspace/src/four_k.txt"}`)}
	call := func(cl *client.Client) func() error {
		return func() error {
			res, err := cl.Call(context.Background(), req)
			if err != nil {
				return err
			}
			if !res.OK || res.Bytes != 4096 {
				return fmt.Errorf("unexpected result %+v", res)
			}
			return nil
		}
	}
	rssIdle := rss(daemons[0].cmd.Process.Pid)

	// warm up all
	for _, sd := range daemons {
		latency(call(sd.c), 200)
	}
	latency(call(noop), 200)

	// Interleaved, so that all see the same disk and CPU conditions:
	// fdatasync cost on a virtual disk drifts by tens of percent over minutes.
	syncOnce, closeSync := fsyncFloor(daemons[0].state)
	defer closeSync()
	var fns []func() error
	for _, sd := range daemons {
		fns = append(fns, call(sd.c))
	}
	dsync := client.New(dsyncSock)
	defer dsync.Close()
	fns = append(fns, call(noop), syncOnce, call(dsync))
	lat := interleaved(*n, fns...)
	sl, nl, sync1, dl := lat[0], lat[len(daemons)], lat[len(daemons)+1], lat[len(daemons)+2]
	catl := latency(func() error {
		out, err := exec.Command("cat", file).Output()
		if err == nil && len(out) != 4096 {
			err = fmt.Errorf("cat read %d bytes", len(out))
		}
		return err
	}, *n/10)

	fmt.Printf("\nread_file of a 4 KiB file, %d sequential calls (µs)\n", *n)
	fmt.Printf("%-44s %9s %9s %9s\n", "", "p50", "p95", "p99")
	row := func(name string, s []time.Duration) {
		fmt.Printf("%-44s %9.0f %9.0f %9.0f\n", name, us(pct(s, 50)), us(pct(s, 95)), us(pct(s, 99)))
	}
	row("sluice read_file (Go client, socket)", sl)
	if len(daemons) > 1 {
		row("baseline sluiced (--base)", lat[1])
	}
	row("floor: no-op HTTP server, same body", nl)
	row("floor: one append+fdatasync (state dir)", sync1)
	row("floor: the no-op server, one durable append", dl)
	row("spawn cat (fork/exec/wait)", catl)
	floor := pct(nl, 50) + pct(sync1, 50)
	budget := floor + 50*time.Microsecond
	over := pct(sl, 50) - floor
	fmt.Printf("\nsluice p50 %.0f µs = transport floor %.0f + durability floor %.0f + %.0f µs of its own work (goal ≤ 50)\n",
		us(pct(sl, 50)), us(pct(nl, 50)), us(pct(sync1, 50)), us(over))
	fmt.Printf("sluice p50 / budget (floors + 50 µs, %.0f µs) = %.2f (goal ≤ 1); sluice p50 / spawn cat = %.2f\n",
		us(budget), float64(pct(sl, 50))/float64(budget), float64(pct(sl, 50))/float64(pct(catl, 50)))
	if len(daemons) > 1 {
		fmt.Printf("baseline p50 %.0f µs = %.2f × budget\n", us(pct(lat[1], 50)), float64(pct(lat[1], 50))/float64(budget))
	}

	// Throughput rows, each server in turn for each client count; CPU is
	// the server process's user+system time per call (from /proc), which
	// a busy machine disturbs far less than wall-clock rates.
	fmt.Printf("\nthroughput over %.0f s per row (calls/s; server CPU µs per call)\n", *secs)
	hdr := fmt.Sprintf("%-8s %9s %7s", "clients", "sluice", "cpu")
	if len(daemons) > 1 {
		hdr += fmt.Sprintf(" %9s %7s", "baseline", "cpu")
	}
	fmt.Printf("%s %9s %7s %7s", hdr, "no-op", "cpu", "ratio")
	if len(daemons) > 1 {
		fmt.Printf(" %9s", "base/noop")
	}
	fmt.Printf(" %10s %7s %7s\n", "no-op+sync", "cpu", "ratio")
	var s8, f8, d8 float64 // the largest client count's rates, for the goals
	for _, k := range clientCounts {
		var rates, cpus []float64
		for _, sd := range daemons {
			r, cpu := throughput(sd.sock, sd.cmd.Process.Pid, req, k, *secs)
			rates, cpus = append(rates, r), append(cpus, cpu)
		}
		f, fcpu := throughput(noopSock, nsrv.Process.Pid, req, k, *secs)
		s8, f8 = rates[0], f
		fmt.Printf("%-8d %9.0f %7.0f", k, rates[0], cpus[0])
		if len(daemons) > 1 {
			fmt.Printf(" %9.0f %7.0f", rates[1], cpus[1])
		}
		fmt.Printf(" %9.0f %7.0f %7.2f", f, fcpu, rates[0]/f)
		if len(daemons) > 1 {
			fmt.Printf(" %9.2f", rates[1]/f)
		}
		d, dcpu := throughput(dsyncSock, dsrv.Process.Pid, req, k, *secs)
		d8 = d
		fmt.Printf(" %10.0f %7.0f %7.2f\n", d, dcpu, d/f)
	}
	rssLoad := rss(daemons[0].cmd.Process.Pid)
	fmt.Printf("\nsluiced RSS: idle %.1f MiB, after load %.1f MiB (goal idle ≤ 30)\n", float64(rssIdle)/1024, float64(rssLoad)/1024)

	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\ngoals (one run, %d CPUs, load average at the end %s; one run on a shared machine is noisy)\n\n",
		runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Printf("| row | measured | goal | |\n| --- | --- | --- | --- |\n")
	goal := func(row, measured, want string, met bool) {
		v := "not met"
		if met {
			v = "met"
		}
		fmt.Printf("| %s | %s | %s | %s |\n", row, measured, want, v)
	}
	goal("read_file 4 KiB, p50", fmt.Sprintf("%.0f µs", us(pct(sl, 50))),
		fmt.Sprintf("≤ the budget, %.0f µs (no-op HTTP floor %.0f + append+fdatasync %.0f + 50)", us(budget), us(pct(nl, 50)), us(pct(sync1, 50))),
		pct(sl, 50) <= budget)
	goal(fmt.Sprintf("read_file, %d clients", clientCounts[len(clientCounts)-1]), fmt.Sprintf("%.0f/s = %.2f× the no-op floor (%.0f/s)", s8, s8/f8, f8), "≥ 0.7× the no-op floor", s8/f8 >= 0.7)
	goal("sluiced RSS after load", fmt.Sprintf("%.1f MiB", float64(rssLoad)/1024), "≤ 30 MiB", rssLoad <= 30*1024)
	fmt.Printf("\nThe no-op server that also makes one record per call durable (append, then an fdatasync\nshared by group commit) serves %.0f/s = %.2f× the no-op floor at %d clients; sluice is %.2f× of it.\n",
		d8, d8/f8, clientCounts[len(clientCounts)-1], s8/d8)
}

// noopServer answers every call with the same read result. With a
// ledger path, each call first appends a ~600-byte record to it and waits
// for an fdatasync that covers the record, one sync shared by every call
// waiting (group commit): the floor of a server that, like sluice, makes a
// record durable before each result leaves.
func noopServer(sock, file, ledger string) {
	var commit func() error
	if ledger != "" {
		commit = groupCommit(ledger)
	}
	data, err := os.ReadFile(file)
	check(err)
	s := string(data)
	res, _ := json.Marshal(api.CallResult{CallID: "c-01NOOP", Verdict: api.VerdictAllow, Reason: api.ReasonAllowed, OK: true, Output: &s, Bytes: int64(len(data)), PolicyVersion: "sha256:" + strings.Repeat("0", 64)})
	health, _ := json.Marshal(api.Health{Status: "ok"})
	ln, err := net.Listen("unix", sock)
	check(err)
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.CallRequest
		json.NewDecoder(r.Body).Decode(&req) // parse like a server would
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/health" {
			w.Write(health)
			return
		}
		if commit != nil {
			if err := commit(); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.Write(res)
	}))
}

// groupCommit returns a function that appends one record to path and
// returns once an fdatasync has covered it. Concurrent callers share
// syncs as the ledger's group commit does: one caller syncs everything
// appended so far; afterwards each waiter it covered is woken once, and
// the role passes straight to the first waiter it did not cover.
func groupCommit(path string) func() error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	check(err)
	line := append(bytes.Repeat([]byte("x"), 600), '\n')
	type waiter struct {
		seq  uint64
		lead chan bool
	}
	var (
		mu              sync.Mutex
		written, synced uint64
		syncing         bool
		broken          error
		waiters         []waiter
	)
	return func() error {
		mu.Lock()
		if _, err := f.Write(line); err != nil {
			mu.Unlock()
			return err
		}
		written++
		mine := written
		for {
			if synced >= mine || broken != nil {
				err := broken
				mu.Unlock()
				return err
			}
			if !syncing {
				syncing = true
				break
			}
			w := waiter{mine, make(chan bool, 1)}
			waiters = append(waiters, w)
			mu.Unlock()
			lead := <-w.lead
			mu.Lock()
			if lead {
				break // syncing stays true: the role was handed over
			}
		}
		upto := written
		mu.Unlock()
		err := unix.Fdatasync(int(f.Fd()))
		mu.Lock()
		if err != nil {
			broken = err
		} else {
			synced = upto
		}
		rest := waiters[:0]
		for _, w := range waiters {
			if synced >= w.seq || broken != nil {
				w.lead <- false
			} else {
				rest = append(rest, w)
			}
		}
		if len(rest) > 0 {
			rest[0].lead <- true
			rest = rest[1:]
		} else {
			syncing = false
		}
		waiters = rest
		mu.Unlock()
		return err
	}
}

func fsyncFloor(dir string) (func() error, func()) {
	f, err := os.OpenFile(filepath.Join(dir, "fsync-floor.bin"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	check(err)
	line := append(bytes.Repeat([]byte("x"), 600), '\n')
	return func() error {
			if _, err := f.Write(line); err != nil {
				return err
			}
			return unix.Fdatasync(int(f.Fd()))
		}, func() {
			f.Close()
			os.Remove(f.Name())
		}
}

// interleaved runs the fns round-robin n times each and returns each one's
// sorted latencies.
// writeCall overwrites ws/name with body (alternating its last byte, so
// every call changes the file) through sluiced.
func writeCall(c *client.Client, ws, name string, body []byte) func() error {
	check(os.WriteFile(filepath.Join(ws, name), body, 0o644))
	i := 0
	return func() error {
		b := bytes.Clone(body)
		b[len(b)-1] = byte('a' + i%2)
		i++
		args, _ := json.Marshal(map[string]any{"path": "workspace/src/" + name, "content": string(b)})
		res, err := c.Call(context.Background(), api.CallRequest{Tool: "write_file", Args: args})
		if err != nil {
			return err
		}
		if !res.OK {
			return fmt.Errorf("write: %+v", res)
		}
		return nil
	}
}

// replaceFloor is the floor of a durable atomic overwrite, in-process:
// write a temp file, fsync it, rename it over the target, fsync the
// directory (2 syncs).
func replaceFloor(ws string, body []byte) func() error {
	target, tmp := filepath.Join(ws, "floor-w.txt"), filepath.Join(ws, ".floor-w.tmp")
	return func() error {
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		if _, err := f.Write(body); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		f.Close()
		if err := os.Rename(tmp, target); err != nil {
			return err
		}
		d, err := os.Open(ws)
		if err != nil {
			return err
		}
		defer d.Close()
		return d.Sync()
	}
}

func interleaved(n int, fns ...func() error) [][]time.Duration {
	out := make([][]time.Duration, len(fns))
	for range n {
		for i, fn := range fns {
			t := time.Now()
			check(fn())
			out[i] = append(out[i], time.Since(t))
		}
	}
	for _, s := range out {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	}
	return out
}

func latency(fn func() error, n int) []time.Duration {
	out := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		check(fn())
		out = append(out, time.Since(t))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// throughput runs clients back to back for secs against sock and returns
// calls/s and the CPU time (user+system) of the server process pid per
// call.
func throughput(sock string, pid int, req api.CallRequest, clients int, secs float64) (float64, float64) {
	var count atomic.Int64
	var wg sync.WaitGroup
	cpu0 := cpuTime(pid)
	deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client.New(sock)
			defer c.Close()
			for time.Now().Before(deadline) {
				if _, err := c.Call(context.Background(), req); err != nil {
					check(err)
				}
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	calls := count.Load()
	return float64(calls) / secs, us(cpuTime(pid)-cpu0) / float64(max(calls, 1))
}

// cpuTime is the user+system time pid has used, from /proc/pid/stat.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from state on
	ut, _ := strconv.ParseInt(f[11], 10, 64)                 // utime is field 14
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

func pct(s []time.Duration, p int) time.Duration { return s[(len(s)-1)*p/100] }
func us(d time.Duration) float64                 { return float64(d.Nanoseconds()) / 1e3 }

func rss(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}

func waitReady(ping func() error) {
	for range 200 {
		if ping() == nil {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	check(fmt.Errorf("server not ready"))
}

// dieWithUs ends a server this program started when it exits, also
// through check's os.Exit, which skips the deferred stops: an orphaned
// sluiced would keep its run dir locked.
var dieWithUs = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "readbench:", err)
		os.Exit(1)
	}
}
