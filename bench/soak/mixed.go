//go:build linux

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
)

// callKinds: one of every 20 calls by index. 8 reads, 3 lists, 3 writes
// (every 4th of a client's writes with a stale if_match), 1 command, 3
// denials, 2 malformed bodies.
var callKinds = [20]string{
	"read", "list", "read", "write", "deny", "read", "malformed", "read", "list", "exec",
	"read", "write", "deny", "read", "list", "malformed", "read", "write", "deny", "read",
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// mixer issues the mixed calls of rows 1 and 4 and checks each result.
type mixer struct {
	fx   *fixture
	exec bool // include the command

	mu         sync.Mutex
	seen       []seenCall
	unexpected []string
	nUnexp     int
	counts     map[string]int
}

// worker is one client: its own connections and its own write chain.
type worker struct {
	id      int
	c       *client.Client
	file    string // ws/out/wN.txt
	sha     string // its content's digest, "" before the first write
	content string
	stale   string // a digest the file had before: an if_match that must fail
	writes  int
}

func (m *mixer) unexpectedf(format string, a ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nUnexp++
	if len(m.unexpected) < 10 {
		m.unexpected = append(m.unexpected, fmt.Sprintf(format, a...))
	}
}

func (m *mixer) saw(kind string, res *api.CallResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counts == nil {
		m.counts = map[string]int{}
	}
	m.counts[kind]++
	if res != nil {
		m.seen = append(m.seen, seenCall{id: res.CallID, verdict: res.Verdict, reason: res.Reason, ok: res.OK})
	}
}

// one makes call i as worker w. check is false in row 4 after the audit
// file system filled, where outcomes are judged by the caller: then the
// result is returned unjudged.
func (m *mixer) one(ctx context.Context, w *worker, i int, judge bool) (string, *api.CallResult, error) {
	kind := callKinds[i%len(callKinds)]
	if kind == "exec" && !m.exec {
		kind = "read"
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	names := make([]string, 0, len(m.fx.files))
	for n := range m.fx.files {
		names = append(names, n)
	}
	sort.Strings(names)
	var (
		body  []byte
		check func(*api.CallResult) string
	)
	switch kind {
	case "read":
		name := names[(i/20)%len(names)]
		body = callBody("read_file", map[string]string{"path": "ws/src/" + name})
		check = func(r *api.CallResult) string {
			if !r.OK || r.Reason != api.ReasonAllowed || r.Output == nil || *r.Output != m.fx.files[name] {
				return "read " + name
			}
			return ""
		}
	case "list":
		body = callBody("list_dir", map[string]string{"path": "ws/src"})
		check = func(r *api.CallResult) string {
			if !r.OK || r.Output == nil {
				return "list"
			}
			// one JSON entry a line
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(*r.Output), "\n") {
				var e api.Entry
				if err := json.Unmarshal([]byte(line), &e); err != nil {
					return "list: " + err.Error()
				}
				got = append(got, e.Name)
			}
			sort.Strings(got)
			if !slices.Equal(got, m.fx.listing) {
				return fmt.Sprintf("list: %v", got)
			}
			return ""
		}
	case "write":
		return m.write(ctx, w, judge)
	case "exec":
		body = callBody("cat", map[string]any{})
		check = func(r *api.CallResult) string {
			if !r.OK || r.ExitCode == nil || *r.ExitCode != 0 || r.Output == nil || *r.Output != m.fx.files["f03.txt"] {
				return "cat"
			}
			return ""
		}
	case "deny":
		type denial struct {
			body   []byte
			reason api.Reason
		}
		ds := []denial{
			{callBody("read_file", map[string]string{"path": "ws/src/.env"}), api.ReasonNeverListed},
			{callBody("read_file", map[string]string{"path": "ws/src/sub/../id.pem"}), api.ReasonNeverListed},
			{callBody("read_file", map[string]string{"path": "ws/src/../../manifest.json"}), api.ReasonOutsideRoots},
			{callBody("read_file", map[string]string{"path": "ws/src/nope.txt"}), api.ReasonNotFound},
			{callBody("no_such_tool", map[string]string{"path": "ws/src/f00.txt"}), api.ReasonUnknownTool},
			{callBody("write_file", map[string]string{"path": "ws/out/.env", "content": "x"}), api.ReasonNeverListed},
			{callBody("cat", map[string]any{"argv": []string{"cat", "/etc/shadow"}}), api.ReasonCommandNotAllowed},
		}
		d := ds[(i/20)%len(ds)]
		if !m.exec && d.reason == api.ReasonCommandNotAllowed {
			d = ds[0]
		}
		body = d.body
		check = func(r *api.CallResult) string {
			if r.OK || r.Verdict != api.VerdictDeny || r.Reason != d.reason || r.Output != nil {
				return "deny " + string(d.reason)
			}
			return ""
		}
	case "malformed":
		bodies := []string{
			`{"tool":`,
			`not json`,
			`{"tool":"read_file","args":{"path":7}}`,
			`{"tool":"read_file","args":{"path":"ws/src/f00.txt"},"bogus":1}`,
			`{"tool":"read_file","args":{"path":"ws/src/f00.txt","extra":true}}`,
			`{"tool":"","args":{}}`,
		}
		b := bodies[(i/20)%len(bodies)]
		code, res, raw, err := callRaw(ctx, w.c, []byte(b))
		m.saw(kind, nil)
		if err != nil {
			return kind, nil, err
		}
		if code != 400 || res != nil {
			m.unexpectedf("malformed %q: status %d, body %.200s", b, code, raw)
		}
		return kind, nil, nil
	}
	code, res, raw, err := callRaw(ctx, w.c, body)
	if err != nil {
		return kind, nil, err
	}
	if res == nil {
		m.unexpectedf("%s: status %d: %.200s", kind, code, raw)
		return kind, nil, nil
	}
	m.saw(kind, res)
	if strings.Contains(string(raw), "SOAK_SECRET") {
		m.unexpectedf("%s: a never-listed file's content reached the client: %.200s", kind, raw)
	}
	if judge {
		if what := check(res); what != "" {
			m.unexpectedf("%s: %s %s ok=%t: %.300s", what, res.Verdict, res.Reason, res.OK, raw)
		}
	}
	return kind, res, nil
}

// write continues w's if_match chain, or (every 4th write) offers a
// digest the file no longer has, which must fail precondition_failed and
// leave the chain as it was.
func (m *mixer) write(ctx context.Context, w *worker, judge bool) (string, *api.CallResult, error) {
	w.writes++
	content := fmt.Sprintf("worker %d write %d %s\n", w.id, w.writes, strings.Repeat("z", w.writes%97))
	args := map[string]string{"path": w.file, "content": content}
	stale := false
	switch {
	case w.sha == "":
		args["mode"] = "create"
	case w.writes%4 == 0 && w.stale != "":
		args["if_match"] = w.stale
		stale = true
	default:
		args["if_match"] = w.sha
	}
	code, res, raw, err := callRaw(ctx, w.c, callBody("write_file", args))
	if err != nil {
		return "write", nil, err
	}
	if res == nil {
		m.unexpectedf("write: status %d: %.200s", code, raw)
		return "write", nil, nil
	}
	m.saw("write", res)
	if res.OK {
		w.stale, w.sha, w.content = w.sha, res.SHA256, content
	}
	if !judge {
		return "write", res, nil
	}
	switch {
	case stale && (res.OK || res.Reason != api.ReasonPreconditionFailed):
		m.unexpectedf("write with a stale if_match: %s %s ok=%t", res.Verdict, res.Reason, res.OK)
	case !stale && (!res.OK || res.SHA256 != sha(content)):
		m.unexpectedf("write %v: %s %s ok=%t sha %s: %.300s", args["if_match"] != "", res.Verdict, res.Reason, res.OK, res.SHA256, raw)
	}
	return "write", res, nil
}

// checkFiles: each worker's file holds its last successful write.
func (m *mixer) checkFiles(ws []*worker) []string {
	var out []string
	for _, w := range ws {
		if w.sha == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.fx.base, w.file))
		if err != nil || string(b) != w.content {
			out = append(out, fmt.Sprintf("%s: holds %.60q, the chain's last write was %.60q (%v)", w.file, b, w.content, err))
		}
	}
	return out
}

func newWorkers(n int, socket string) []*worker {
	ws := make([]*worker, n)
	for i := range ws {
		ws[i] = &worker{id: i, c: client.New(socket), file: fmt.Sprintf("ws/out/w%d.txt", i)}
	}
	return ws
}

// scenarioMixed is row 1.
func scenarioMixed(dir string) (r row) {
	fx, err := makeFixture(dir, strings.Join([]string{toolRead, toolList, toolWrite, toolCat}, ","))
	if !r.check(err, "fixture") {
		return
	}
	d := newDaemon(dir, fx.manifest)
	if !r.check(d.start(), "start") {
		return
	}
	m := &mixer{fx: fx, exec: true}
	ws := newWorkers(nClients, d.socket)
	var next atomic.Int64
	var errs atomic.Int64
	var firstErr atomic.Value
	phase := func(end int) {
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= end {
						next.Add(-1)
						return
					}
					if _, _, err := m.one(context.Background(), w, i, true); err != nil {
						if errs.Add(1) == 1 {
							firstErr.Store(err.Error())
						}
					}
				}
			}()
		}
		wg.Wait()
	}
	var use []usage
	began := time.Now()
	for _, pct := range []int{10, 50, 100} {
		end := nCalls * pct / 100
		phase(end)
		// Measured with nothing in flight, the pools full and the
		// clients' connections closed, so that the figures compare.
		for _, w := range ws {
			w.c.Close()
		}
		if !r.check(d.quiet(true), fmt.Sprintf("quiet at %d%%", pct)) {
			return
		}
		u, err := d.usage()
		if !r.check(err, "usage") {
			return
		}
		use = append(use, u)
		fmt.Printf("   %3d%% (%d calls, %.1f s): %s\n", pct, end, time.Since(began).Seconds(), u)
	}
	took := time.Since(began)
	m.mu.Lock()
	counts := fmt.Sprintf("read %d, list %d, write %d, exec %d, deny %d, malformed %d",
		m.counts["read"], m.counts["list"], m.counts["write"], m.counts["exec"], m.counts["deny"], m.counts["malformed"])
	m.mu.Unlock()
	r.note("%d calls from %d clients in %.1f s (%.0f calls/s): %s; %d unexpected, %d client errors",
		nCalls, nClients, took.Seconds(), float64(nCalls)/took.Seconds(), counts, m.nUnexp, errs.Load())
	for _, u := range m.unexpected {
		r.fail("unexpected: %s", u)
	}
	if m.nUnexp > len(m.unexpected) {
		r.fail("%d unexpected results in all", m.nUnexp)
	}
	if n := errs.Load(); n > 0 {
		r.fail("%d calls ended in a client error, the first: %v", n, firstErr.Load())
	}
	for _, p := range m.checkFiles(ws) {
		r.fail("write chain: %s", p)
	}
	// Flat after warm-up: what 90% of the calls added to what the
	// first 10% left. Allowances: a few fds and goroutines (timers,
	// the GC's workers), and a quarter of the RSS (the heap settles
	// between GC cycles) or 8 MiB.
	w, h, f := use[0], use[1], use[2]
	r.note("at 10%%: %s", w)
	r.note("at 50%%: %s", h)
	r.note("at 100%%: %s", f)
	if f.fds > w.fds+4 || h.fds > w.fds+4 {
		r.fail("fds grew after warm-up: %d → %d → %d; new since 10%%: %v", w.fds, h.fds, f.fds, f.fdsAdded(w))
	}
	if f.goroutines > w.goroutines+8 || h.goroutines > w.goroutines+8 {
		r.fail("goroutines grew after warm-up: %d → %d → %d", w.goroutines, h.goroutines, f.goroutines)
	}
	rssAllow := max(w.rssKiB/4, 8<<10)
	if f.rssKiB > w.rssKiB+rssAllow {
		r.fail("RSS grew after warm-up: %.1f → %.1f → %.1f MiB (allowed +%.1f)",
			float64(w.rssKiB)/1024, float64(h.rssKiB)/1024, float64(f.rssKiB)/1024, float64(rssAllow)/1024)
	}
	if !r.check(d.stop(), "stop") {
		return
	}
	d.checkClean(&r, dir)
	ledgerChecks(&r, d, m.seen)
	return
}

// ledgerChecks verifies the stopped daemon's ledger with the CLI and
// checks that every result a client saw is explained by its records.
func ledgerChecks(r *row, d *daemon, seen []seenCall) map[string]*ledgerCall {
	out, err := d.verify()
	if r.check(err, "ledger") {
		r.note("ledger: %s", out)
	}
	calls, kinds, probs := ledgerReport(d.ledger(), seen)
	for _, p := range probs {
		r.fail("ledger: %s", p)
	}
	if len(probs) == 0 {
		r.note("ledger: all %d results the clients saw are explained (a decision record, and a result record for an allowed call; none for an audit_unavailable denial); %d decisions, %d results in all",
			len(seen), kinds["decision"], kinds["result"])
	}
	return calls
}
