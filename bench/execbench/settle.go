//go:build linux

package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A pooled call is measured with its pool full and no refill running:
// after every call to a sluiced, and before the pause that follows it,
// settle waits (untimed) until the daemon's pool for that tool is full
// again, read from its sluice_pool_ready and sluice_pool_size gauges. So
// a refill's CPU never lands in the next sample, whichever side or method
// that is; the refill's cost shows in the 8-client throughput row and in
// "sluiced CPU/call". A daemon built before --metrics-listen existed (an
// old --bin-old) is not settled.
//
// A scrape costs the daemon about a millisecond of CPU, so settle polls
// with a backoff (a refill takes tens of milliseconds), counts its
// scrapes, and cpuCalls takes their cost, measured once per daemon by
// calibrate, out of "sluiced CPU/call".

// metricsAddr returns a free loopback address for --metrics-listen, or ""
// if bin's sluiced has no such flag.
func metricsAddr(bin string) string {
	out, _ := exec.Command(filepath.Join(bin, "sluiced"), "--help").CombinedOutput()
	if !strings.Contains(string(out), "metrics-listen") {
		return ""
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// metrics reads d's /metrics: each sample line's value by its name and
// labels as written (e.g. `sluice_pool_ready{tool="v_cat"}`).
func (d *daemon) metrics() (map[string]float64, error) {
	res, err := http.Get("http://" + d.metricsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.LastIndexByte(l, ' '); i > 0 {
			if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
				m[l[:i]] = v
			}
		}
	}
	return m, sc.Err()
}

// settle waits until d's pool for tool is full, for at most 10 s.
func (d *daemon) settle(tool string) {
	if d.metricsAddr == "" {
		return
	}
	label := `{tool="` + tool + `"}`
	deadline := time.Now().Add(10 * time.Second)
	wait := 5 * time.Millisecond
	for {
		m, err := d.metrics()
		check(err)
		d.scrapes++
		if m["sluice_pool_ready"+label] >= m["sluice_pool_size"+label] {
			return
		}
		if time.Now().After(deadline) {
			d.unsettled++
			return
		}
		time.Sleep(wait)
		wait = min(wait*3/2, 20*time.Millisecond)
	}
}

// calibrate measures what one scrape of d's metrics costs d in CPU.
func (d *daemon) calibrate() {
	if d.metricsAddr == "" {
		return
	}
	const n = 200
	t0 := cpuTime(d)
	for range n {
		_, err := d.metrics()
		check(err)
	}
	d.scrapeCPU = (cpuTime(d) - t0) / n
}

// cpuCalls is d's CPU per call since cpu0 and scrapes0 (cpuTime and
// d.scrapes then), over calls calls, less what settle's scrapes cost.
func (d *daemon) cpuCalls(cpu0 time.Duration, scrapes0, calls int) time.Duration {
	used := cpuTime(d) - cpu0 - time.Duration(d.scrapes-scrapes0)*d.scrapeCPU
	return max(0, used) / time.Duration(calls)
}

// poolHits is how many of d's calls to tool took a warm container, and
// how many found the pool empty, so far (-1, -1 without metrics).
func (d *daemon) poolHits(tool string) (hits, misses int) {
	if d.metricsAddr == "" {
		return -1, -1
	}
	m, err := d.metrics()
	check(err)
	label := `{tool="` + tool + `"}`
	return int(m["sluice_pool_hits_total"+label]), int(m["sluice_pool_misses_total"+label])
}

// hitNote says how a row's pooled calls fared, from poolHits before and
// after it.
func hitNote(h0, m0, h1, m1 int) string {
	if h0 < 0 || h1+m1 == h0+m0 {
		return ""
	}
	return fmt.Sprintf("pool %d/%d warm", h1-h0, h1-h0+m1-m0)
}
