//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
)

// auditTmpfs is the size of the tmpfs that holds the state dir: room for
// the ledger's 4 MiB reserve (audit.DefaultReserve), for the ledger once
// the reserve is used up, and for a fresh reserve once the filler is gone
// (until then health stays degraded: the reserve cannot be renewed).
const auditTmpfs = "16m"

type observed struct {
	ord      int64 // completion order
	phase    int   // when the call started: 0 before the fill, 1 during or after it
	afterAU  bool  // it started after the first audit_unavailable came back
	kind     string
	res      *api.CallResult
	clientEr error
}

// scenarioAuditFull is row 4.
func scenarioAuditFull(dir string) (r row) {
	fx, err := makeFixture(dir, fmt.Sprintf("%s,%s,%s,%s", toolRead, toolList, toolWrite, toolCat))
	if !r.check(err, "fixture") {
		return
	}
	state := filepath.Join(dir, "state")
	if !r.check(os.MkdirAll(state, 0o755), "state dir") {
		return
	}
	if !r.check(unix.Mount("tmpfs", state, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+auditTmpfs+",mode=0755"), "mount tmpfs") {
		return
	}
	atExit(func() { unix.Unmount(state, unix.MNT_DETACH) })
	d := newDaemon(dir, fx.manifest) // stopped before the tmpfs goes
	if !r.check(d.start(), "start") {
		return
	}
	m := &mixer{fx: fx, exec: true}
	ws := newWorkers(nClients, d.socket)

	var (
		next, completed atomic.Int64
		fillStarted     atomic.Bool
		firstAU         atomic.Int64 // completion order of the first audit_unavailable; 0: none yet
		mu              sync.Mutex
		obs             []observed
		wg              sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				phase := 0
				if fillStarted.Load() {
					phase = 1
				}
				afterAU := firstAU.Load() != 0
				kind, res, err := m.one(context.Background(), w, i, phase == 0)
				ord := completed.Add(1)
				if res != nil && res.Reason == api.ReasonAuditUnavailable {
					firstAU.CompareAndSwap(0, ord)
				}
				mu.Lock()
				obs = append(obs, observed{ord: ord, phase: phase, afterAU: afterAU, kind: kind, res: res, clientEr: err})
				mu.Unlock()
			}
		}()
	}
	stopWorkers := func() { cancel(); wg.Wait() }
	defer stopWorkers()

	// Fill the file system once the calls are going.
	if !r.check(poll(2*time.Minute, func() error {
		if n := completed.Load(); n < 300 {
			return fmt.Errorf("%d calls done", n)
		}
		return nil
	}), "calls before the fill") {
		return
	}
	fillStarted.Store(true)
	filler := filepath.Join(state, "filler")
	f, err := os.OpenFile(filler, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if !r.check(err, "filler") {
		return
	}
	chunk := bytes.Repeat([]byte{0xa5}, 64<<10)
	var filled int64
	for range 4096 {
		n, err := f.Write(chunk)
		filled += int64(n)
		if err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				r.fail("fill: %v", err)
			}
			break
		}
	}
	f.Close()
	filledAt := completed.Load()
	var st unix.Statfs_t
	unix.Statfs(state, &st)
	r.note("state dir on a %s tmpfs, filled with %.1f MiB after %d calls (%d bytes free)", auditTmpfs, float64(filled)/(1<<20), filledAt, st.Bavail*uint64(st.Bsize))

	var degraded string
	if r.check(poll(time.Minute, func() error {
		h, err := d.c.Health(context.Background())
		if err != nil {
			return err
		}
		if h.Status != "degraded" {
			return fmt.Errorf("health %s", h.Status)
		}
		degraded = h.AuditError
		return nil
	}), "health degraded") {
		r.note("health: degraded: %.160s", degraded)
	}
	// Until the reserve is used up and then some.
	if !r.check(poll(3*time.Minute, func() error {
		au := firstAU.Load()
		if au == 0 {
			return fmt.Errorf("no audit_unavailable yet after %d calls", completed.Load())
		}
		if n := completed.Load(); n < au+600 {
			return fmt.Errorf("%d calls since the first audit_unavailable", n-au)
		}
		return nil
	}), string(api.ReasonAuditUnavailable)) {
		return
	}
	stopWorkers()

	// Judge what came back after the fill.
	mu.Lock()
	all := obs
	mu.Unlock()
	var onReserve, reserveAllowed, auN, auRan, afterAUOther, clientErrs int
	var lastDecided []observed
	for _, o := range all {
		if o.clientEr != nil {
			clientErrs++
			if clientErrs <= 3 {
				r.fail("client error: %s: %v", o.kind, o.clientEr)
			}
			continue
		}
		if o.res == nil {
			continue // malformed: a 400, judged by m
		}
		lastDecided = append(lastDecided, o)
		if o.phase == 0 {
			continue
		}
		res := o.res
		if res.Reason == api.ReasonAuditUnavailable {
			auN++
			// Verdict allow: the decision was recorded and the call ran,
			// but its result could not be recorded, so its outcome stays
			// in the daemon (the ledger check wants that decision).
			if res.OK || res.Output != nil || res.OutputB64 != "" || res.Stderr != "" || res.ExitCode != nil || res.SHA256 != "" || res.Bytes != 0 {
				r.fail("an audit_unavailable result carries an outcome: %+v", *res)
			}
			if res.Verdict == api.VerdictAllow {
				auRan++
			}
			continue
		}
		if o.afterAU {
			afterAUOther++ // recorded (the ledger check below): a shorter record fit
		} else {
			onReserve++
			if res.Verdict == api.VerdictAllow {
				reserveAllowed++
			}
		}
	}
	sortByOrd(lastDecided)
	tailN := min(200, len(lastDecided))
	steady := 0
	for _, o := range lastDecided[len(lastDecided)-tailN:] {
		if o.res.Reason == api.ReasonAuditUnavailable {
			steady++
		}
	}
	r.note("after the fill: %d calls recorded on the reserve (%d allowed), then from call %d on %d audit_unavailable (%d of them allow: decided and ran, result unrecordable, outcome withheld); %d recorded after the first (a record that still fit)",
		onReserve, reserveAllowed, firstAU.Load()-filledAt, auN, auRan, afterAUOther)
	if steady != tailN {
		r.fail("of the last %d decided calls before space was freed, only %d were denied audit_unavailable", tailN, steady)
	}
	if m.nUnexp > 0 {
		for _, u := range m.unexpected {
			r.fail("before the fill: unexpected: %s", u)
		}
	}

	// Space back: the daemon serves again.
	freed := time.Now()
	if !r.check(os.Remove(filler), "free space") {
		return
	}
	if !r.check(poll(time.Minute, func() error {
		res, err := d.c.Call(context.Background(), api.CallRequest{Tool: "read_file", Args: []byte(`{"path":"ws/src/f02.txt"}`)})
		if err != nil {
			return stop(err)
		}
		m.saw("read", res)
		if !res.OK {
			return fmt.Errorf("read: %s", res.Reason)
		}
		return nil
	}), "serving after space was freed") {
		return
	}
	servedAfter := time.Since(freed)
	if !r.check(poll(time.Minute, func() error {
		// The ledger renews its reserve on a sync, at most once a
		// second: a call makes one.
		res, err := d.c.Call(context.Background(), api.CallRequest{Tool: "read_file", Args: []byte(`{"path":"ws/src/f02.txt"}`)})
		if err != nil {
			return stop(err)
		}
		m.saw("read", res)
		h, err := d.c.Health(context.Background())
		if err != nil {
			return err
		}
		if h.Status != "ok" {
			return fmt.Errorf("health %s: %s", h.Status, h.AuditError)
		}
		return nil
	}), "health ok after space was freed") {
		return
	}
	healthyAfter := time.Since(freed)
	// Each write chain restarts from what its file holds now: a write
	// that ran but whose result could not be recorded changed it.
	for _, w := range ws {
		if b, err := os.ReadFile(filepath.Join(fx.base, w.file)); err == nil {
			w.content, w.sha, w.stale = string(b), sha(string(b)), ""
		}
	}
	before := m.nUnexp
	nAfter := 400
	var burst sync.WaitGroup
	var burstNext atomic.Int64
	burstNext.Store(next.Load())
	end := burstNext.Load() + int64(nAfter)
	for _, w := range ws {
		burst.Add(1)
		go func() {
			defer burst.Done()
			for {
				i := burstNext.Add(1) - 1
				if i >= end {
					return
				}
				if _, _, err := m.one(context.Background(), w, int(i), true); err != nil {
					m.unexpectedf("after space was freed: client error %v", err)
				}
			}
		}()
	}
	burst.Wait()
	r.note("space freed: a read served after %.0f ms, health ok after %.0f ms; then %d mixed calls with %d unexpected",
		float64(servedAfter.Microseconds())/1000, float64(healthyAfter.Microseconds())/1000, nAfter, m.nUnexp-before)
	if m.nUnexp > before {
		for _, u := range m.unexpected {
			r.fail("unexpected: %s", u)
		}
	}
	if !r.check(d.stop(), "stop") {
		return
	}
	d.checkClean(&r, dir, state)
	calls := ledgerChecks(&r, d, m.seen)
	// Nothing ran unrecorded: what each write target holds was written
	// by a call whose allowed decision is in the ledger.
	written := map[string]bool{}
	for _, lc := range calls {
		if lc.decision == nil || lc.decision.Tool != "write_file" || lc.decision.Verdict != "allow" {
			continue
		}
		var a struct {
			SHA string `json:"content_sha256"`
		}
		if json.Unmarshal(lc.decision.Args, &a) == nil {
			written[a.SHA] = true
		}
	}
	for _, w := range ws {
		b, err := os.ReadFile(filepath.Join(fx.base, w.file))
		if err != nil {
			continue
		}
		if !written[sha(string(b))] {
			r.fail("%s holds content no allowed, recorded write decision names", w.file)
		}
	}
	return
}

func sortByOrd(os []observed) {
	for i := 1; i < len(os); i++ { // nearly sorted already
		for j := i; j > 0 && os[j].ord < os[j-1].ord; j-- {
			os[j], os[j-1] = os[j-1], os[j]
		}
	}
}
