//go:build linux

// Command tputab compares execute throughput of several sluiced builds
// side by side: each --bin gets its own daemon on the same manifest (one
// execute tool, /bin/true, pool --pool, pool_max --pool-max), and in
// each of --rounds rounds every daemon in turn serves --clients clients
// calling back to back for --seconds, so a busy machine's load falls on
// all of them alike. It prints calls/s, p50 and p95 latency, and the CPU
// sluiced and its containers used per call (from /proc/PID/stat).
//
// With --burst-gap D the clients do not call back to back: they call
// once each, all at the same moment, then wait D (the pool refills), for
// --seconds: bursts bigger than the pool.
//
//	tputab --bin bin --bin ../old/bin [--rounds 3] [--seconds 3] [--clients 8] [--pool 8] [--burst-gap 1s]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
)

type bins []string

func (b *bins) String() string     { return strings.Join(*b, ",") }
func (b *bins) Set(v string) error { *b = append(*b, v); return nil }

type daemon struct {
	bin  string
	cmd  *exec.Cmd
	sock string
	lat  []time.Duration
	secs float64
	cpu  float64 // seconds
}

func main() {
	var bs bins
	flag.Var(&bs, "bin", "a directory with sluiced and sluice-helper (repeat to compare)")
	rounds := flag.Int("rounds", 3, "rounds; each runs every daemon once")
	secs := flag.Float64("seconds", 3, "seconds per daemon per round")
	clients := flag.Int("clients", 8, "concurrent clients")
	pool := flag.Int("pool", 8, "the tool's pool")
	poolMax := flag.Int("pool-max", -1, "the tool's pool_max (-1: leave it out)")
	burstGap := flag.Duration("burst-gap", 0, "call in bursts (every client once, at once) this far apart instead of back to back")
	flag.Parse()
	if len(bs) == 0 {
		bs = bins{"bin"}
	}
	work, err := os.MkdirTemp("/var/tmp", "sluice-tputab")
	check(err)
	defer os.RemoveAll(work)
	os.Chmod(work, 0o755)
	check(os.Mkdir(filepath.Join(work, "ws"), 0o755))
	tool := map[string]any{"operation": "execute", "commands": [][]string{{"/bin/true"}}, "mounts": []string{"ws"}, "cwd": "ws", "pool": *pool}
	if *poolMax >= 0 {
		tool["pool_max"] = *poolMax
	}
	m, _ := json.Marshal(map[string]any{"schema_version": 1, "tools": map[string]any{"t": tool}})
	manifest := filepath.Join(work, "manifest.json")
	check(os.WriteFile(manifest, m, 0o644))
	var ds []*daemon
	defer func() {
		for _, d := range ds {
			d.cmd.Process.Signal(syscall.SIGTERM)
			d.cmd.Wait()
		}
	}()
	for i, b := range bs {
		tag := strconv.Itoa(i)
		d := &daemon{bin: b, sock: filepath.Join(work, tag+".sock")}
		d.cmd = exec.Command(filepath.Join(b, "sluiced"), "--manifest", manifest, "--socket", d.sock,
			"--state-dir", filepath.Join(work, "state"+tag), "--run-dir", filepath.Join(work, "run"+tag), "--log-level", "error")
		d.cmd.Stderr = os.Stderr
		check(d.cmd.Start())
		ds = append(ds, d)
		c := client.New(d.sock)
		for j := 0; ; j++ {
			if _, err := c.Health(context.Background()); err == nil {
				break
			}
			if j > 400 {
				check(fmt.Errorf("%s: sluiced not ready", b))
			}
			time.Sleep(25 * time.Millisecond)
		}
		c.Close()
	}
	time.Sleep(time.Second) // pools fill
	for range *rounds {
		for _, d := range ds {
			cpu0 := cpuOf(d.cmd.Process.Pid)
			lat := run(d.sock, *clients, *secs, *burstGap)
			time.Sleep(500 * time.Millisecond) // refills and destroys of this round
			d.cpu += cpuOf(d.cmd.Process.Pid) - cpu0
			d.lat = append(d.lat, lat...)
			d.secs += *secs
		}
	}
	how := "back to back"
	if *burstGap > 0 {
		how = fmt.Sprintf("in bursts %v apart", *burstGap)
	}
	fmt.Printf("\n%d clients %s, /bin/true, pool %d, %d rounds of %.0f s, interleaved\n", *clients, how, *pool, *rounds, *secs)
	fmt.Printf("%-32s %9s %9s %9s %14s\n", "", "calls/s", "p50 ms", "p95 ms", "CPU ms/call")
	for _, d := range ds {
		sort.Slice(d.lat, func(i, j int) bool { return d.lat[i] < d.lat[j] })
		n := len(d.lat)
		fmt.Printf("%-32s %9.1f %9.1f %9.1f %14.1f\n", d.bin, float64(n)/d.secs,
			ms(d.lat[n/2]), ms(d.lat[n*95/100]), d.cpu*1000/float64(n))
	}
}

func run(sock string, clients int, secs float64, gap time.Duration) []time.Duration {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client.New(sock)
			defer c.Close()
			for i := 0; time.Now().Before(deadline); i++ {
				if gap > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(i) * gap)))
				}
				t := time.Now()
				res, err := c.Call(context.Background(), api.CallRequest{Tool: "t"})
				if err != nil || !res.OK {
					check(fmt.Errorf("call: %v %+v", err, res))
				}
				mu.Lock()
				lat = append(lat, time.Since(t))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lat
}

// cpuOf is the user+system time of pid and its waited-for children, in
// seconds.
func cpuOf(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	check(err)
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var t float64
	for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		v, _ := strconv.ParseFloat(f[i], 64)
		t += v
	}
	return t / 100 // CLK_TCK
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "tputab:", err)
		os.Exit(1)
	}
}
