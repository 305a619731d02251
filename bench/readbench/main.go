//go:build linux

// Command readbench measures read_file of a 4 KiB file through sluiced
// over its unix socket against, in the same run: the transport floor (a
// no-op HTTP server on a unix socket, in its own process, answering the
// same body), the durability floor (one append+fdatasync in the state
// dir), and spawning cat. It prints a table with ratios, then the goals
// table: each of the Performance issue's read-path goals, as the value or
// ratio it is stated in, and whether this run met it.
//
//	readbench --bin bin [--n 3000] [--seconds 5]
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
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "noop-server" {
		noopServer(os.Args[2], os.Args[3])
		return
	}
	bin := flag.String("bin", "bin", "directory holding sluiced")
	n := flag.Int("n", 3000, "sequential calls per latency measurement")
	secs := flag.Float64("seconds", 4, "seconds per throughput measurement")
	work := flag.String("dir", "", "work dir on a real disk (default: a temp dir under /var/tmp)")
	flag.Parse()
	if *work == "" {
		d, err := os.MkdirTemp("/var/tmp", "sluice-bench")
		check(err)
		defer os.RemoveAll(d)
		*work = d
	}
	ws := filepath.Join(*work, "workspace", "src")
	check(os.MkdirAll(ws, 0o755))
	body := bytes.Repeat([]byte("0123456789abcde\n"), 256) // 4096 bytes
	file := filepath.Join(ws, "four_k.txt")
	check(os.WriteFile(file, body, 0o644))
	manifest := filepath.Join(*work, "manifest.json")
	check(os.WriteFile(manifest, []byte(`{"schema_version":1,"tools":{"read_file":{"operation":"read","roots":["workspace/src"]}}}`), 0o644))

	// sluiced
	sock := filepath.Join(*work, "sluice.sock")
	state := filepath.Join(*work, "state")
	d := exec.Command(filepath.Join(*bin, "sluiced"), "--manifest", manifest, "--socket", sock, "--state-dir", state, "--run-dir", filepath.Join(*work, "run"), "--log-level", "error")
	d.Stderr = os.Stderr
	check(d.Start())
	defer func() { d.Process.Signal(unix.SIGTERM); d.Wait() }()
	c := client.New(sock)
	waitReady(func() error { _, err := c.Health(context.Background()); return err })

	// no-op floor, its own process like sluiced
	noopSock := filepath.Join(*work, "noop.sock")
	self, _ := os.Executable()
	nsrv := exec.Command(self, "noop-server", noopSock, file)
	nsrv.Stderr = os.Stderr
	check(nsrv.Start())
	defer func() { nsrv.Process.Kill(); nsrv.Wait() }()
	noop := client.New(noopSock)
	waitReady(func() error { _, err := noop.Health(context.Background()); return err })

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
	rssIdle := rss(d.Process.Pid)

	// warm up both
	latency(call(c), 200)
	latency(call(noop), 200)

	// Interleaved, so that all three see the same disk and CPU conditions:
	// fdatasync cost on a virtual disk drifts by tens of percent over minutes.
	syncOnce, closeSync := fsyncFloor(state)
	defer closeSync()
	lat := interleaved(*n, call(c), call(noop), syncOnce)
	sl, nl, sync1 := lat[0], lat[1], lat[2]
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
	row("floor: no-op HTTP server, same body", nl)
	row("floor: one append+fdatasync (state dir)", sync1)
	row("spawn cat (fork/exec/wait)", catl)
	floor := pct(nl, 50) + pct(sync1, 50)
	over := pct(sl, 50) - floor
	fmt.Printf("\nsluice p50 %.0f µs = transport floor %.0f + durability floor %.0f + %.0f µs of its own work (goal ≤ 50)\n",
		us(pct(sl, 50)), us(pct(nl, 50)), us(pct(sync1, 50)), us(over))
	fmt.Printf("sluice p50 / (transport+durability floors) = %.2f; sluice p50 / spawn cat = %.2f\n",
		float64(pct(sl, 50))/float64(floor), float64(pct(sl, 50))/float64(pct(catl, 50)))

	fmt.Printf("\nthroughput over %.0f s per row (calls/s)\n", *secs)
	fmt.Printf("%-10s %12s %12s %8s\n", "clients", "sluice", "no-op floor", "ratio")
	var s8, f8 float64
	for _, k := range []int{1, 2, 4, 8} {
		s := throughput(sock, req, k, *secs)
		f := throughput(noopSock, req, k, *secs)
		fmt.Printf("%-10d %12.0f %12.0f %8.2f\n", k, s, f, s/f)
		s8, f8 = s, f
	}
	rssLoad := rss(d.Process.Pid)
	fmt.Printf("\nsluiced RSS: idle %.1f MiB, after load %.1f MiB (goal ≤ 30)\n", float64(rssIdle)/1024, float64(rssLoad)/1024)

	budget := floor + 50*time.Microsecond
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
	goal("read_file, 8 clients", fmt.Sprintf("%.0f/s = %.2f× the no-op floor (%.0f/s)", s8, s8/f8, f8), "≥ 0.7× the no-op floor", s8/f8 >= 0.7)
	goal("sluiced RSS after load", fmt.Sprintf("%.1f MiB", float64(rssLoad)/1024), "≤ 30 MiB", rssLoad <= 30*1024)
}

func noopServer(sock, file string) {
	data, err := os.ReadFile(file)
	check(err)
	s := string(data)
	res, _ := json.Marshal(api.CallResult{CallID: "c-01NOOP", Verdict: "allow", Reason: "allowed", OK: true, Output: &s, Bytes: int64(len(data)), PolicyVersion: "sha256:" + strings.Repeat("0", 64)})
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
		w.Write(res)
	}))
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

func throughput(sock string, req api.CallRequest, clients int, secs float64) float64 {
	var count atomic.Int64
	var wg sync.WaitGroup
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
	return float64(count.Load()) / secs
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

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "readbench:", err)
		os.Exit(1)
	}
}
