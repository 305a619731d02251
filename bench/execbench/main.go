//go:build linux

// Command execbench measures executing /bin/true and cat of a 4 KiB file
// (a) directly, (b) with bwrap --unshare-all and read-only binds, (c) with
// runc run on an equivalent bundle (same uid, no capabilities,
// no_new_privs, read-only root, limits and seccomp profile as sluice), (d)
// through sluice with the warm pool and (e) through sluice cold (pool 0),
// interleaved sample by sample in one run, and prints a table with
// ratios. Latency calls are spaced ~40 ms apart so the pool is refilled;
// throughput is back to back with 8 concurrent clients.
//
// --views runs instead the view rows (see views.go): tools whose mount is
// a 10,000-file git tree, through sluice's FUSE view against bwrap
// --ro-bind of the same tree, interleaved sample by sample. --bin-old DIR
// adds a second, older sluiced beside them as one more column; --rivals
// adds codex sandbox and srt (installed from npm under --rivals-dir) on
// the cat, find and git status rows. The write rows (writes.go: go test
// through a tool with writes and cache against bwrap --bind, and a
// 200-file changeset against its floor) follow the execute rows in the
// default run; --writes runs only them. --all runs the execute rows, the
// write rows and the view rows. Every run ends with a goals table: each of the Performance issue's
// goals that the run measured, as the ratio or value the goal is stated
// in, and whether it was met.
//
//	execbench --bin bin [--n 150] [--seconds 5] [--views | --writes | --all] [--view-n 30] [--cache-n 10] [--changeset-n 20] [--bin-old DIR] [--rivals [--rivals-dir DIR]]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/profiles"
)

func main() {
	bin := flag.String("bin", "bin", "directory holding sluiced and sluice-helper")
	n := flag.Int("n", 150, "latency samples per method")
	secs := flag.Float64("seconds", 5, "seconds of the throughput run")
	space := flag.Duration("space", 40*time.Millisecond, "pause between latency calls")
	binOld := flag.String("bin-old", "", "directory holding a second (older) sluiced and sluice-helper: one more method in the execute rows (pooled, cold, and its own throughput run) and one more column in the view rows")
	viewsOnly := flag.Bool("views", false, "run only the view rows (the FUSE view against bwrap --ro-bind)")
	all := flag.Bool("all", false, "run the execute rows, the write rows and the view rows")
	writesOnly := flag.Bool("writes", false, "run only the write rows (go test with writes and cache against bwrap --bind; a 200-file changeset against its floor)")
	cacheN := flag.Int("cache-n", 10, "samples per side of the go test row (0: leave the row out)")
	changesetN := flag.Int("changeset-n", 20, "samples per column of the 200-file changeset row (0: leave the row out)")
	viewN := flag.Int("view-n", 30, "samples per view row, per side")
	rivals := flag.Bool("rivals", false, "also run codex sandbox and srt (installed from npm under --rivals-dir) on the view rows' cat, find and git status")
	cache, _ := os.UserCacheDir()
	rivalsDir := flag.String("rivals-dir", filepath.Join(cache, "sluice-bench", "rivals"), "where --rivals installs the rivals")
	demo := flag.String("demo", "profiles/examples/workspace", "the demo workspace, copied for the unittest row")
	orderFlag := flag.String("order", "shuffle", "the order of each round's samples: shuffle (a new random order each round, seeded 1: each method follows every other alike) or rotate (one cyclic order whose start moves by one each round: each method nearly always follows the same one)")
	flag.Parse()
	views := *viewsOnly || *all || *rivals
	gap = *space
	switch *orderFlag {
	case "rotate", "shuffle":
		order = *orderFlag
	default:
		check(fmt.Errorf("--order %q: want rotate or shuffle", *orderFlag))
	}
	work, err := os.MkdirTemp("/var/tmp", "sluice-execbench")
	check(err)
	workDir = work
	defer os.RemoveAll(work)
	os.Chmod(work, 0o755)
	ws := filepath.Join(work, "ws")
	check(os.MkdirAll(ws, 0o755))
	file := filepath.Join(ws, "four_k.txt")
	check(os.WriteFile(file, bytes.Repeat([]byte("0123456789abcde\n"), 256), 0o644))
	t0 := time.Now()
	if !*viewsOnly && !*writesOnly {
		execRows(work, ws, file, *bin, *binOld, *n, *secs, *space)
	}
	if !*viewsOnly || *all {
		writeRows(work, *bin, *cacheN, *changesetN, *space)
	}
	if views {
		dir := ""
		if *rivals {
			dir = *rivalsDir
		}
		viewRows(work, *binOld, *bin, *demo, *viewN, *space, dir)
	}
	host, _ := os.Hostname()
	load, _ := os.ReadFile("/proc/loadavg")
	printGoals(fmt.Sprintf("one run on %s, %d CPUs, %.0f s, load average at the end %s, samples in %s order; one run on a shared machine is noisy",
		host, runtime.NumCPU(), time.Since(t0).Seconds(), strings.Join(strings.Fields(string(load))[:3], " "), order))
}

// execRows is the original comparison: direct, bwrap, runc, sluice pooled
// and cold, then throughput. With binOld, an older build's pooled and cold
// rows run interleaved beside the others (same manifest, a daemon of its
// own), and its throughput run follows the current build's.
func execRows(work, ws, file, bin, binOld string, n int, secs float64, space time.Duration) {
	// sluice
	manifest := filepath.Join(work, "manifest.json")
	tool := func(argv []string, pool int) string {
		b, _ := json.Marshal(map[string]any{"operation": "execute", "commands": [][]string{argv}, "mounts": []string{"ws"}, "cwd": "ws", "pool": pool})
		return string(b)
	}
	check(os.WriteFile(manifest, []byte(`{"schema_version":1,"tools":{`+
		`"true_pool":`+tool([]string{"/bin/true"}, 2)+`,"cat_pool":`+tool([]string{"cat", file}, 2)+
		`,"true_cold":`+tool([]string{"/bin/true"}, 0)+`,"cat_cold":`+tool([]string{"cat", file}, 0)+
		`,"true_tput":`+tool([]string{"/bin/true"}, 8)+`}}`), 0o644))
	dm := startDaemon(bin, manifest, work, "")
	defer dm.stop()
	sock := dm.sock
	var old *daemon
	if binOld != "" {
		old = startDaemon(binOld, manifest, work, "old-")
		defer old.stop()
	}
	time.Sleep(500 * time.Millisecond) // pools fill
	sluiceOn := func(d *daemon, name string) func() error {
		c := d.c
		return func() error {
			res, err := c.Call(context.Background(), api.CallRequest{Tool: name})
			if err == nil && !res.OK {
				err = fmt.Errorf("%s: %s %s", name, res.Reason, res.Stderr)
			}
			return err
		}
	}
	sluice := func(name string) func() error { return sluiceOn(dm, name) }
	// bwrap
	bwrapArgs := []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
		"--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--ro-bind", ws, ws, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", ws}
	run := func(name string, args ...string) func() error {
		return func() error {
			cmd := exec.Command(name, args...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s: %v: %s", name, err, out.String())
			}
			return nil
		}
	}
	// runc
	bundle := runcBundle(work, ws)
	runcN := 0
	runc := func(argv ...string) func() error {
		cfgPath := filepath.Join(bundle, "config.json")
		return func() error {
			var cfg specs.Spec
			b, _ := os.ReadFile(cfgPath)
			json.Unmarshal(b, &cfg)
			cfg.Process.Args = argv
			b, _ = json.Marshal(cfg)
			os.WriteFile(cfgPath, b, 0o644)
			runcN++
			return run("runc", "run", "--bundle", bundle, fmt.Sprintf("sluice-bench-%d-%d", os.Getpid(), runcN))()
		}
	}
	type method struct {
		name       string
		true_, cat func() error
		tools      [2]string // sluice's tools: after each call, wait for their pools to be full (settle.go)
		d          *daemon   // whose pools
	}
	methods := []method{
		{"direct fork/exec", run("/bin/true"), run("cat", file), [2]string{}, nil},
		{"bwrap --unshare-all", run("bwrap", append(bwrapArgs, "/bin/true")...), run("bwrap", append(bwrapArgs, "cat", file)...), [2]string{}, nil},
		{"runc run", runc("/bin/true"), runc("cat", file), [2]string{}, nil},
	}
	// libcontainer alone, on runc's bundle, in a process of its own that
	// times each container itself (libct.go): what any program built on
	// it pays for a cold container; and the same without the bundle's
	// seccomp profile, which libcontainer's init compiles in each
	// container: what it pays at the least.
	selfTimed := map[string]*libct{}
	lct := startLibct(bin, bundle, work, "libct-state")
	if lct != nil {
		defer lct.stop()
		methods = append(methods, method{libctName, lct.run("/bin/true"), lct.run("cat", file), [2]string{}, nil})
		selfTimed[libctName] = lct
		if l := startLibct(bin, bundle, work, "libct-nosecc-state", "--no-seccomp"); l != nil {
			defer l.stop()
			methods = append(methods, method{libctNoSecc, l.run("/bin/true"), l.run("cat", file), [2]string{}, nil})
			selfTimed[libctNoSecc] = l
		}
	}
	methods = append(methods, []method{
		{"sluice, warm pool", sluice("true_pool"), sluice("cat_pool"), [2]string{"true_pool", "cat_pool"}, dm},
		{"sluice, cold (pool 0)", sluice("true_cold"), sluice("cat_cold"), [2]string{"true_cold", "cat_cold"}, dm},
	}...)
	// The floor of a pooled call: its records made durable (one append
	// and fdatasync on the daemon's file system: an effect-free call's
	// decision and result share the one sync, docs/design.md §3) and the
	// command (a direct fork/exec); spaced like the calls, so that the
	// disk and the CPUs have idled before it as before a call.
	syncFile, err := os.OpenFile(filepath.Join(work, "fsync-floor.bin"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	check(err)
	defer syncFile.Close()
	line := append(bytes.Repeat([]byte("x"), 500), '\n')
	durable := func() error {
		if _, err := syncFile.Write(line); err != nil {
			return err
		}
		return unix.Fdatasync(int(syncFile.Fd()))
	}
	floor := func(cmd func() error) func() error {
		return func() error {
			if err := durable(); err != nil {
				return err
			}
			return cmd()
		}
	}
	methods = append(methods, method{floorName, floor(run("/bin/true")), floor(run("cat", file)), [2]string{}, nil})
	if old != nil {
		methods = append(methods,
			method{"old build, warm pool", sluiceOn(old, "true_pool"), sluiceOn(old, "cat_pool"), [2]string{"true_pool", "cat_pool"}, old},
			method{"old build, cold", sluiceOn(old, "true_cold"), sluiceOn(old, "cat_cold"), [2]string{"true_cold", "cat_cold"}, old})
	}
	// Interleaved: sample i of every method and command runs before
	// sample i+1 of any, in an order shuffled each round, so that the
	// machine's drift and each method's wake after another's work land
	// on all alike.
	var fns []timed
	for _, m := range methods {
		for k, fn := range []func() error{m.true_, m.cat} {
			t := timed{run: fn}
			if l := selfTimed[m.name]; l != nil {
				t.took = l.took
			}
			if tool, d := m.tools[k], m.d; tool != "" {
				t.after = func() { d.settle(tool) }
			}
			fns = append(fns, t)
		}
	}
	h0, m0 := dm.poolHits("true_pool")
	c0, cm0 := dm.poolHits("cat_pool")
	lat := interleave(fns, n)
	h1, m1 := dm.poolHits("true_pool")
	c1, cm1 := dm.poolHits("cat_pool")
	p50 := map[string][2]time.Duration{}
	fmt.Printf("\nexecute latency, %d calls each, interleaved, spaced %v apart (ms)\n", n, space)
	fmt.Printf("%-24s %9s %9s %9s %9s\n", "", "true p50", "true p95", "cat p50", "cat p95")
	for i, m := range methods {
		t, k := lat[2*i], lat[2*i+1]
		p50[m.name] = [2]time.Duration{pct(t, 50), pct(k, 50)}
		fmt.Printf("%-24s %9.2f %9.2f %9.2f %9.2f\n", m.name, ms(pct(t, 50)), ms(pct(t, 95)), ms(pct(k, 50)), ms(pct(k, 95)))
	}
	if note := hitNote(h0, m0, h1, m1); note != "" {
		fmt.Printf("warm pool: true %s, cat %s; sluiced's pools waited for after each call (%d waits gave up)\n", note, hitNote(c0, cm0, c1, cm1), dm.unsettled)
	}
	fl := p50[floorName]
	pool, cold := p50["sluice, warm pool"], p50["sluice, cold (pool 0)"]
	bw, direct, runcP := p50["bwrap --unshare-all"], p50["direct fork/exec"], p50["runc run"]
	ratioGoal("execute /bin/true, pooled, p50", pool[0], bw[0], "bwrap", 0.4)
	ratioGoal("execute /bin/true, pooled, p50", pool[0], fl[0], "floor", 1.3)
	ratioGoal("one cat of a 4 KiB file, pooled, p50", pool[1], bw[1], "bwrap", 0.5)
	infoRow("execute /bin/true, pooled, p50, against a direct fork/exec", fmt.Sprintf("%.2f× (%.2f ms vs %.2f ms)", float64(pool[0])/float64(direct[0]), ms(pool[0]), ms(direct[0])))
	ratioGoal("execute /bin/true, cold (pool 0), p50", cold[0], runcP[0], "runc run", 0.5)
	// What a pooled call cannot go below here: the command's own exec
	// between the two durable appends; the socket, HTTP and sluice's
	// work come on top.
	for k, cmd := range []string{"/bin/true", "cat"} {
		infoRow("floor of a pooled "+cmd+": append+fdatasync, then fork/exec", fmt.Sprintf("%.2f ms = %.2f× bwrap; sluice pooled is %.2f ms above it",
			ms(fl[k]), float64(fl[k])/float64(bw[k]), ms(pool[k]-fl[k])))
	}
	if lc, ok := p50[libctName]; ok {
		infoRow("of a cold start: libcontainer alone as runc embeds it, /bin/true (create, run, wait in one process; runc's bundle; no socket, audit, view or helper)",
			fmt.Sprintf("%.2f ms = %.2f× runc run; sluice cold (all of a call) is %.2f× it", ms(lc[0]), float64(lc[0])/float64(runcP[0]), float64(cold[0])/float64(lc[0])))
		infoRow("of a cold start: libcontainer alone, cat of 4 KiB", fmt.Sprintf("%.2f ms = %.2f× runc run", ms(lc[1]), float64(lc[1])/float64(runcP[1])))
		if d := lct.destroyP50(); d > 0 {
			infoRow("libcontainer alone: its Destroy after the run (untimed above; sluice's is after the reply too)", fmt.Sprintf("%.2f ms p50", ms(d)))
		}
	}
	if lc, ok := p50[libctNoSecc]; ok {
		infoRow("of a cold start: libcontainer alone without the bundle's seccomp profile, /bin/true (what libcontainer's own init costs a container here at the least)",
			fmt.Sprintf("%.2f ms = %.2f× runc run; sluice cold (all of a call, its filter loaded) is %.2f× it", ms(lc[0]), float64(lc[0])/float64(runcP[0]), float64(cold[0])/float64(lc[0])))
	}
	infoRow("cat, cold (pool 0), p50", fmt.Sprintf("%.2f× runc run (%.2f ms vs %.2f ms)", float64(cold[1])/float64(runcP[1]), ms(cold[1]), ms(runcP[1])))
	// What a cold start pays the kernel before anything else: its first
	// process moved into fresh cgroups after an idle spell.
	if mv, k, err := cgroupMove(20, space); err == nil {
		fmt.Printf("moving a new process into fresh cgroups (%d hierarchies), %v apart: p50 %.2f ms\n", k, space, ms(mv))
		infoRow("of a cold start: a new process moved into fresh cgroups (all hierarchies)", fmt.Sprintf("%.2f ms (%d hierarchies); ~10 ms is an RCU grace period, gone with cgroup2's favordynmods (docs/operating.md)", ms(mv), k))
	} else {
		fmt.Printf("moving a new process into fresh cgroups: not measured: %v\n", err)
	}

	// Syncs a pooled call waits for: sluiced's sluice_audit_sync_seconds
	// count over calls one at a time (each sync then a real fdatasync).
	for _, d := range []struct {
		label string
		d     *daemon
	}{{"this build", dm}, {"old build", old}} {
		if d.d == nil {
			continue
		}
		if per, ok := syncsPerCall(d.d, "true_pool", 20); ok {
			fmt.Printf("ledger syncs per pooled /bin/true call (%s): %.2f\n", d.label, per)
			infoRow("ledger syncs per pooled /bin/true call, "+d.label, fmt.Sprintf("%.2f", per))
		}
	}
	if old != nil {
		o, oc := p50["old build, warm pool"], p50["old build, cold"]
		infoRow("old build: /bin/true pooled, cold, p50", fmt.Sprintf("%.2f× bwrap, %.2f× runc run (%.2f ms, %.2f ms)",
			float64(o[0])/float64(bw[0]), float64(oc[0])/float64(runcP[0]), ms(o[0]), ms(oc[0])))
	}

	rate, p95 := throughput("this build", sock, secs)
	addGoal("execute /bin/true, 8 clients back to back", fmt.Sprintf("%.0f calls/s", rate), "≥ 120 calls/s", rate >= 120)
	addGoal("execute /bin/true, 8 clients back to back, p95", fmt.Sprintf("%.1f ms", ms(p95)), "≤ 100 ms", p95 <= 100*time.Millisecond)
	if old != nil {
		dm.stop() // its pools' refills would take the old build's CPU
		orate, op95 := throughput("old build", old.sock, secs)
		infoRow("old build: 8 clients back to back", fmt.Sprintf("%.0f calls/s, p95 %.1f ms", orate, ms(op95)))
	}
}

// floorName is the method that measures a pooled call's floor.
const floorName = "floor: sync + fork/exec"

// syncsPerCall makes k calls of tool on d one after another and returns
// how many ledger syncs each waited for, from d's metrics; false when d
// has no metrics listener.
func syncsPerCall(d *daemon, tool string, k int) (float64, bool) {
	const key = "sluice_audit_sync_seconds_count"
	if d.metricsAddr == "" {
		return 0, false
	}
	m0, err := d.metrics()
	if err != nil {
		return 0, false
	}
	for range k {
		res, err := d.c.Call(context.Background(), api.CallRequest{Tool: tool})
		if err != nil || !res.OK {
			check(fmt.Errorf("%s: %v %+v", tool, err, res))
		}
		d.settle(tool)
	}
	m1, err := d.metrics()
	if err != nil {
		return 0, false
	}
	return (m1[key] - m0[key]) / float64(k), true
}

// throughput runs 8 clients back to back on the true_tput tool for secs
// and prints and returns calls/s and the p95 latency: the refill rate
// bounds it.
func throughput(label, sock string, secs float64) (float64, time.Duration) {
	var mu sync.Mutex
	var tput []time.Duration
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := client.New(sock)
			defer cl.Close()
			for time.Now().Before(deadline) {
				t := time.Now()
				res, err := cl.Call(context.Background(), api.CallRequest{Tool: "true_tput"})
				if err != nil || !res.OK {
					check(fmt.Errorf("throughput call: %v %+v", err, res))
				}
				mu.Lock()
				tput = append(tput, time.Since(t))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(tput, func(i, j int) bool { return tput[i] < tput[j] })
	rate, p95 := float64(len(tput))/secs, pct(tput, 95)
	fmt.Printf("\nsustained, 8 concurrent clients, /bin/true for %.0f s (%s): %.0f calls/s, p50 %.1f ms, p95 %.1f ms\n",
		secs, label, rate, ms(pct(tput, 50)), ms(p95))
	return rate, p95
}

// runcBundle writes an OCI bundle equivalent to sluice's container: the
// same read-only binds, uid 65534, no capabilities, no_new_privs,
// read-only root, memory and pids limits, and profiles/default.json.
func runcBundle(work, ws string) string {
	bundle := filepath.Join(work, "bundle")
	rootfs := filepath.Join(bundle, "rootfs")
	check(os.MkdirAll(rootfs, 0o755))
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if t, err := os.Readlink("/" + l); err == nil {
			os.Symlink(t, filepath.Join(rootfs, l))
		}
	}
	var sc specs.LinuxSeccomp
	check(json.Unmarshal(profiles.DefaultSeccomp, &sc))
	mem, pids := int64(512<<20), int64(256)
	ro := []string{"rbind", "ro", "nosuid", "nodev"}
	spec := specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: "rootfs", Readonly: true},
		Process: &specs.Process{
			User: specs.User{UID: 65534, GID: 65534}, Cwd: ws, Env: []string{"PATH=/usr/bin:/bin"},
			Capabilities: &specs.LinuxCapabilities{}, NoNewPrivileges: true, Args: []string{"/bin/true"},
		},
		Hostname: "bench",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=64k"}},
			{Destination: "/usr", Type: "bind", Source: "/usr", Options: ro},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", "size=67108864"}},
			{Destination: ws, Type: "bind", Source: ws, Options: ro},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, {Type: "cgroup"}},
			Resources: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &mem, Swap: &mem}, Pids: &specs.LinuxPids{Limit: &pids},
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}},
			Seccomp:       &sc,
			MaskedPaths:   []string{"/proc/kcore", "/proc/keys", "/proc/timer_list"},
			ReadonlyPaths: []string{"/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	b, err := json.MarshalIndent(spec, "", " ")
	check(err)
	check(os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644))
	return bundle
}

var (
	gap   = 40 * time.Millisecond
	order = "shuffle" // --order
)

// timed is one sample's call, and what to do after it, untimed.
type timed struct {
	run   func() error
	after func()
	took  func() time.Duration // the sample's time as run measured it itself, if not nil
}

// interleave runs every fn n times (after 3 warm-up calls each), in n
// rounds of one sample of each, each call followed by its after and a
// pause of gap, and returns each fn's sorted latencies. A round's order
// is shuffled (--order shuffle, the default), so that each fn follows
// every other about as often: a call to sluiced that follows another
// process's work (a container's, bwrap's) is slower than one that
// follows a call to the same sluiced, and in one fixed cyclic order
// (--order rotate, the order before 2026-12-06) the pooled /bin/true row
// always followed libcontainer's and the pooled cat row always followed
// it, the floor a cold call (docs/performance.md).
func interleave(fns []timed, n int) [][]time.Duration {
	call := func(f timed) time.Duration {
		t := time.Now()
		check(f.run())
		d := time.Since(t)
		if f.took != nil {
			d = f.took()
		}
		if f.after != nil {
			f.after()
		}
		time.Sleep(gap)
		return d
	}
	for range 3 {
		for _, f := range fns {
			call(f)
		}
	}
	out := make([][]time.Duration, len(fns))
	rng := rand.New(rand.NewPCG(1, 1))
	perm := make([]int, len(fns))
	for i := range n {
		for k := range perm {
			perm[k] = (i + k) % len(fns)
		}
		if order == "shuffle" {
			rng.Shuffle(len(perm), func(a, b int) { perm[a], perm[b] = perm[b], perm[a] })
		}
		for _, j := range perm {
			out[j] = append(out[j], call(fns[j]))
		}
	}
	for _, s := range out {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	}
	return out
}

func pct(s []time.Duration, p int) time.Duration { return s[(len(s)-1)*p/100] }
func ms(d time.Duration) float64                 { return float64(d.Microseconds()) / 1000 }

// daemon is a sluiced started by startDaemon.
type daemon struct {
	cmd         *exec.Cmd
	c           *client.Client
	sock        string
	metricsAddr string        // --metrics-listen, or "" (see settle.go)
	unsettled   int           // settle calls that gave up waiting
	scrapes     int           // metrics read by settle
	scrapeCPU   time.Duration // the daemon's CPU per metrics read (calibrate)
	once        sync.Once
}

// startDaemon starts bin/sluiced on manifest with its socket, state dir
// and run dir in work (named with tag, so that two daemons can share work)
// and waits until it answers.
func startDaemon(bin, manifest, work, tag string) *daemon {
	sock := filepath.Join(work, tag+"s.sock")
	args := []string{"--manifest", manifest, "--socket", sock,
		"--state-dir", filepath.Join(work, tag+"state"), "--run-dir", filepath.Join(work, tag+"run"), "--log-level", "error"}
	maddr := metricsAddr(bin)
	if maddr != "" {
		args = append(args, "--metrics-listen", maddr)
	}
	cmd := exec.Command(filepath.Join(bin, "sluiced"), args...)
	cmd.Stderr = os.Stderr
	check(cmd.Start())
	d := &daemon{cmd: cmd, c: client.New(sock), sock: sock, metricsAddr: maddr}
	stopDaemons = append(stopDaemons, d.stop)
	for i := 0; ; i++ {
		if _, err := d.c.Health(context.Background()); err == nil {
			break
		}
		if i > 200 {
			check(fmt.Errorf("%s: sluiced not ready", bin))
		}
		time.Sleep(25 * time.Millisecond)
	}
	return d
}

func (d *daemon) stop() {
	d.once.Do(func() {
		d.c.Close()
		d.cmd.Process.Signal(unix.SIGTERM)
		d.cmd.Wait()
	})
}

// stopDaemons stop the daemons started, and workDir is removed, when a
// check fails.
var (
	stopDaemons []func()
	workDir     string
)

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "execbench:", strings.TrimSpace(err.Error()))
		for _, stop := range stopDaemons {
			stop()
		}
		if workDir != "" {
			os.RemoveAll(workDir)
		}
		os.Exit(1)
	}
}
