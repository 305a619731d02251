//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/sandbox"
)

// sleepsRunning lists the pids of live "sleep 600" processes in the run
// dir's container cgroups.
func sleepsRunning(runDir string) []string {
	var pids []string
	for _, l := range sandbox.Leftovers(runDir) {
		if pid, ok := strings.CutPrefix(l, "process "); ok {
			if c, _ := os.ReadFile("/proc/" + pid + "/cmdline"); string(c) == "sleep\x00600\x00" {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// scenarioKill is row 2: sluiced is SIGKILLed with nInflight calls in
// flight from the clients' side: nInflight/2 commands (sleep 600, each in
// its container) and reads in a loop from nInflight clients.
func scenarioKill(dir string) (r row) {
	nCmd := max(nInflight/2, 1)
	fx, err := makeFixture(dir, strings.Join([]string{toolRead, toolSleep}, ","))
	if !r.check(err, "fixture") {
		return
	}
	d := newDaemon(dir, fx.manifest, "--max-containers", strconv.Itoa(nCmd+4))
	if !r.check(d.start(), "start") {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var (
		inflight atomic.Int64
		reads    atomic.Int64 // reads done
		mu       sync.Mutex
		seen     []seenCall
		cmdRes   []string // commands that got a result: none may
		readBad  []string
		lastErr  time.Time
		wg       sync.WaitGroup
		done     = make(chan string, 4*nInflight)
	)
	gotErr := func(kind string, err error) {
		mu.Lock()
		lastErr = time.Now()
		mu.Unlock()
		done <- kind + ": " + err.Error()
	}
	// The commands: each is decided, made durable, then runs sleep 600.
	for i := range nCmd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client.New(d.socket)
			defer c.Close()
			cctx, ccancel := context.WithTimeout(ctx, 3*time.Minute) // never a hang
			defer ccancel()
			inflight.Add(1)
			res, err := c.Call(cctx, api.CallRequest{Tool: "sleeper", Task: fmt.Sprintf("soak-cmd-%d", i)})
			inflight.Add(-1)
			if err != nil {
				gotErr("command", err)
				return
			}
			mu.Lock()
			cmdRes = append(cmdRes, fmt.Sprintf("%s %s %s", res.CallID, res.Verdict, res.Reason))
			mu.Unlock()
			done <- "command: a result"
		}()
	}
	var pids []string
	if !r.check(poll(4*time.Minute, func() error {
		pids = sleepsRunning(d.run)
		if len(pids) < nCmd {
			return fmt.Errorf("%d of %d commands running", len(pids), nCmd)
		}
		return nil
	}), "commands started") {
		return
	}
	// The readers: each reads in a loop until its call fails.
	for range nInflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client.New(d.socket)
			defer c.Close()
			for n := 0; ; n++ {
				cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
				inflight.Add(1)
				res, err := c.Call(cctx, api.CallRequest{Tool: "read_file", Args: []byte(`{"path":"ws/src/f05.txt"}`)})
				inflight.Add(-1)
				ccancel()
				if err != nil {
					gotErr("read", err)
					return
				}
				reads.Add(1)
				mu.Lock()
				seen = append(seen, seenCall{id: res.CallID, verdict: res.Verdict, reason: res.Reason, ok: res.OK})
				if !res.OK || res.Output == nil || *res.Output != fx.files["f05.txt"] {
					readBad = append(readBad, fmt.Sprintf("%s %s ok=%t", res.CallID, res.Reason, res.OK))
				}
				mu.Unlock()
			}
		}()
	}
	// Kill the moment the clients have nInflight calls out, once the
	// readers are going (each has had a few calls served).
	var atKill int64
	var killed time.Time
	if !r.check(poll(2*time.Minute, func() error {
		if n := reads.Load(); n < int64(4*nInflight) {
			return fmt.Errorf("%d reads done", n)
		}
		if n := inflight.Load(); n < int64(nInflight) {
			return fmt.Errorf("%d calls in flight", n)
		}
		d.cmd.Process.Signal(os.Kill)
		killed = time.Now()
		atKill = inflight.Load()
		return nil
	}), "calls in flight") {
		return
	}
	<-d.exited
	// Every client must get an error, within a bound: never a hang.
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		r.fail("clients still waiting 2 min after the kill: %d calls in flight (a hang)", inflight.Load())
		cancel()
		<-all
	}
	close(done)
	kinds := map[string]int{}
	for s := range done {
		k := s
		if strings.HasPrefix(s, "read: ") || strings.HasPrefix(s, "command: ") {
			k = s[:strings.IndexByte(s, ':')] + ": " + errClass(s)
		}
		kinds[k]++
	}
	mu.Lock()
	r.note("SIGKILL with %d calls in flight (%d commands running sleep 600, %d read clients, %d reads served before); all %d clients got an error, the last %.0f ms after the kill",
		atKill, len(pids), nInflight, len(seen), nCmd+nInflight, float64(lastErr.Sub(killed).Microseconds())/1000)
	r.note("client errors: %v", kinds)
	for _, c := range cmdRes {
		r.fail("a killed command got a result: %s", c)
	}
	for _, b := range readBad {
		r.fail("a read before the kill: %s", b)
	}
	mu.Unlock()

	// What the killed daemon left, then the restart's sweep.
	left := sandbox.Leftovers(d.run)
	mounts := mountsUnder(dir)
	nProc, nCg, nMnt, nRootfs := 0, 0, 0, 0
	for _, l := range left {
		switch {
		case strings.HasPrefix(l, "process "):
			nProc++
		case strings.HasPrefix(l, "mount "):
			nMnt++
		case strings.HasPrefix(l, "rootfs "):
			nRootfs++
		default:
			nCg++
		}
	}
	r.note("left by the kill: %d processes, %d cgroups, %d rootfs dirs, %d mounts under the run dir; %d mounts under the work dir",
		nProc, nCg, nRootfs, nMnt, len(mounts))
	if verbose {
		fmt.Printf("   leftovers: %v\n   mounts: %v\n", left, mounts)
	}
	if nProc < nCmd {
		r.fail("only %d container processes outlived the daemon, want at least %d (the sleeps)", nProc, nCmd)
	}
	if !r.check(d.start(), "restart") || !r.check(d.quiet(false), "restart: pools full") {
		return
	}
	logs := d.log.String()
	if strings.Contains(logs, "sandbox sweep incomplete") {
		r.fail("the restart's sweep was incomplete: %s", grepLines(logs, "sandbox sweep incomplete"))
	}
	if !strings.Contains(logs, "removed sandbox leftovers") {
		r.fail("the restart logged no sweep")
	}
	now := map[string]bool{}
	for _, l := range sandbox.Leftovers(d.run) {
		now[l] = true
	}
	for _, m := range mountsUnder(dir) {
		now["mountinfo "+m] = true
	}
	var still []string
	for _, l := range left {
		if now[l] {
			still = append(still, l)
		}
	}
	// The run dir's rootfs and state dirs are tmpfs mounts of the
	// runner's own, kept while it runs (a crashed run's state stays
	// mounted so the sweep finds its containers): the restart must take
	// them over, not stack others on them. Every other mount the kill
	// left must be gone.
	owned := map[string]bool{filepath.Join(d.run, "rootfs"): true, filepath.Join(d.run, "state"): true}
	for _, m := range mounts {
		if !owned[m] && now["mountinfo "+m] {
			still = append(still, "mountinfo "+m)
		}
	}
	for m := range owned {
		if n := count(mountsUnder(dir), m); n > 1 {
			still = append(still, fmt.Sprintf("%d mounts stacked on %s", n, m))
		}
	}
	for _, pid := range pids {
		if alive(pid) {
			still = append(still, "sleep pid "+pid)
		}
	}
	if len(still) > 0 {
		r.fail("left after the restart's sweep: %v", still)
	} else {
		r.note("the restart swept all of it (its own pools since: %d entries)", len(now))
	}
	res, err := d.c.Call(context.Background(), api.CallRequest{Tool: "read_file", Args: []byte(`{"path":"ws/src/f05.txt"}`)})
	if r.check(err, "read after the restart") {
		seen = append(seen, seenCall{id: res.CallID, verdict: res.Verdict, reason: res.Reason, ok: res.OK})
		if !res.OK {
			r.fail("read after the restart: %s", res.Reason)
		}
	}
	if !r.check(d.stop(), "stop") {
		return
	}
	d.checkClean(&r, dir)
	calls := ledgerChecks(&r, d, seen)
	// Each command that ran has its durable allowed decision.
	ran := 0
	for _, lc := range calls {
		if lc.decision != nil && lc.decision.Tool == "sleeper" && lc.decision.Verdict == "allow" {
			ran++
		}
	}
	if ran < nCmd {
		r.fail("%d commands ran, the ledger holds %d allowed decisions for them", nCmd, ran)
	} else {
		r.note("ledger: the %d killed commands' allowed decisions are there", ran)
	}
	return
}

func count(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}

// errClass shortens a client error to its kind.
func errClass(s string) string {
	for _, k := range []string{"connection refused", "connection reset", "EOF", "broken pipe", "no such file", "context deadline exceeded", "timeout"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// alive: the process exists and is not a zombie.
func alive(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
