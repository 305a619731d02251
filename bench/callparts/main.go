//go:build linux

// Command callparts shows where a pooled execute call's time goes: it
// starts bin/sluiced with a pool-2 tool for /bin/true (mount and cwd as
// bench/exec.sh's) and --metrics-listen, makes -n calls -space apart,
// each followed by the pooled call's floor (a 500-byte append and
// fdatasync in sluiced's state directory, then a fork/exec of /bin/true
// from Go), then -n GET /v1/health round trips, and prints the client's
// p50s beside the means of sluiced's own histograms over the calls
// (decision, the records' appends, the execution, the one sync).
//
//	go run ./bench/callparts [-bin bin] [-n 150] [-space 40ms]
//	    [-pre "CMD ARGS"]   run CMD before each call and each floor, -space before them
//	    [-cold]             a pool-0 call of the same command after each call
//	    [-extra N]          one more tool with a pool of N (more boxes waiting)
//
// Needs root and bin/ (make build). Asserts nothing.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
)

func metrics(addr string) map[string]float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.LastIndexByte(l, ' '); i > 0 {
			v, _ := strconv.ParseFloat(l[i+1:], 64)
			m[l[:i]] = v
		}
	}
	return m
}

func main() {
	bin := flag.String("bin", "bin", "directory holding sluiced")
	n := flag.Int("n", 150, "calls (and floors, and health round trips)")
	withCold := flag.Bool("cold", false, "a pool-0 call after each pooled call (its box made and destroyed)")
	extra := flag.Int("extra", 0, "the pool size of one more tool (more boxes waiting)")
	space := flag.Duration("space", 40*time.Millisecond, "pause before each call, floor and round trip")
	pre := flag.String("pre", "", "a command run before each call and each floor, space before it (e.g. a bwrap)")
	flag.Parse()
	work, err := os.MkdirTemp("/var/tmp", "sluice-callparts")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(work)
	ws := filepath.Join(work, "ws")
	os.MkdirAll(ws, 0o755)
	// The same tool three times but for its pool: t, the calls timed; c,
	// the -cold calls; x, -extra's boxes.
	tool := func(pool int) map[string]any {
		return map[string]any{"operation": "execute", "commands": [][]string{{"/bin/true"}}, "mounts": []string{"ws"}, "cwd": "ws", "pool": pool}
	}
	mf := filepath.Join(work, "m.json")
	b, _ := json.Marshal(map[string]any{"schema_version": 1, "tools": map[string]any{"t": tool(2), "c": tool(0), "x": tool(*extra)}})
	if err := os.WriteFile(mf, b, 0o644); err != nil {
		panic(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	sock := filepath.Join(work, "s.sock")
	cmd := exec.Command(filepath.Join(*bin, "sluiced"), "--manifest", mf, "--socket", sock, "--state-dir", filepath.Join(work, "state"), "--run-dir", filepath.Join(work, "run"), "--log-level", "error", "--metrics-listen", addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	defer func() { cmd.Process.Signal(unix.SIGTERM); cmd.Wait() }()
	c := client.New(sock)
	for i := 0; ; i++ {
		if _, err := c.Health(context.Background()); err == nil {
			break
		}
		if i == 250 {
			panic("sluiced not ready after 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	settle := func() {
		for i := 0; i < 500; i++ {
			m := metrics(addr)
			if m[`sluice_pool_ready{tool="t"}`] >= m[`sluice_pool_size{tool="t"}`] && m[`sluice_pool_size{tool="t"}`] > 0 {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	settle()
	// floor
	f, err := os.OpenFile(filepath.Join(work, "state", "floor.bin"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		panic(err)
	}
	line := append([]byte(strings.Repeat("x", 500)), '\n')
	var lat, fl, syncs, fx []time.Duration
	m0 := metrics(addr)
	preRun := func() {
		if *pre == "" {
			return
		}
		time.Sleep(*space)
		a := strings.Fields(*pre)
		if err := exec.Command(a[0], a[1:]...).Run(); err != nil {
			panic(err)
		}
	}
	for i := 0; i < *n; i++ {
		preRun()
		time.Sleep(*space)
		t0 := time.Now()
		res, err := c.Call(context.Background(), api.CallRequest{Tool: "t"})
		if err != nil || !res.OK {
			panic(fmt.Sprint(err, res))
		}
		lat = append(lat, time.Since(t0))
		settle()
		if *withCold {
			time.Sleep(*space)
			if res, err := c.Call(context.Background(), api.CallRequest{Tool: "c"}); err != nil || !res.OK {
				panic(fmt.Sprint(err, res))
			}
		}
		preRun()
		time.Sleep(*space)
		t0 = time.Now()
		f.Write(line)
		unix.Fdatasync(int(f.Fd()))
		t1 := time.Now()
		exec.Command("/bin/true").Run()
		fl = append(fl, time.Since(t0))
		syncs = append(syncs, t1.Sub(t0))
		fx = append(fx, time.Since(t1))
	}
	var hl []time.Duration
	for i := 0; i < *n; i++ {
		time.Sleep(*space)
		t0 := time.Now()
		if _, err := c.Health(context.Background()); err != nil {
			panic(err)
		}
		hl = append(hl, time.Since(t0))
	}
	m1 := metrics(addr)
	d := func(k string) float64 { return m1[k] - m0[k] }
	p50 := func(s []time.Duration) float64 {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	fmt.Printf("health p50 %.2f ms\n", p50(hl))
	fmt.Printf("client p50 %.2f ms; floor p50 %.2f (sync %.2f, fork/exec %.2f)\n", p50(lat), p50(fl), p50(syncs), p50(fx))
	for _, k := range []string{"sluice_decision_seconds", `sluice_execution_seconds{tool="t"}`, "sluice_audit_append_seconds", "sluice_audit_sync_seconds"} {
		base := k
		lab := ""
		if i := strings.IndexByte(k, '{'); i > 0 {
			base, lab = k[:i], k[i:]
		}
		cnt := d(base + "_count" + lab)
		sum := d(base + "_sum" + lab)
		if cnt > 0 {
			fmt.Printf("%s: n=%.0f mean %.3f ms\n", k, cnt, sum/cnt*1000)
		}
	}
}
