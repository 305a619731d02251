//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/sandbox"
)

// Commands that write (issue 26): two rows, each interleaved sample by
// sample in one run.
//
//   - A test run writing caches in a 10,000-file project: `go test ./...`
//     of a small package (whose test writes a report beside it) in a
//     project that also holds the 10,000-file tree, through a sluice
//     execute tool with writes (roots: the project, commit "discard") and
//     cache (/root/.cache, GOCACHE beneath it), against bwrap --bind of
//     the project and of a cache directory on a tmpfs (sluice's caches are
//     tmpfs too) running the same command with the same environment.
//     Each call passes a fresh BENCH_RUN, which the test reads, so go
//     test's result cache misses: every call builds from the warm build
//     cache, links and runs the test, and writes its result to the cache.
//     Beside them, as context: /bin/true through the same tool and the
//     same bwrap binds (what starting the box costs, apart from the
//     test), go test ./calc on both sides (the package alone, without
//     go's walk of the 10,000 files), and bwrap started from a CPU
//     cgroup of its own, a sibling of sluice's (how the host shares its
//     CPUs between cgroups, apart from the sandbox).
//   - A changeset of 200 files × 4 KiB: a command making them in a fresh
//     directory, its changeset committed (auto) and dropped (discard),
//     against the floor: the same files written, fsynced and renamed into
//     place by this process and their directory fsynced (as
//     daemon.BenchmarkChangeset200 does).

// goBin is the Go toolchain the test-run row uses (under /usr, which
// sluice's containers and bwrap's both bind read-only).
const goBin = "/usr/local/go/bin/go"

// The sample project's package and its tests: small, real, stdlib only.
const (
	benchGoMod  = "module benchproj\n\ngo 1.26\n"
	benchCalcGo = `package calc

import "strings"

// Add returns a+b.
func Add(a, b int) int { return a + b }

// Fib returns the n-th Fibonacci number.
func Fib(n int) int {
	a, b := 0, 1
	for range n {
		a, b = b, a+b
	}
	return a
}

// Words counts the words of s.
func Words(s string) int { return len(strings.Fields(s)) }
`
	benchCalcTestGo = `package calc

import (
	"fmt"
	"os"
	"testing"
)

func TestAdd(t *testing.T) {
	for _, c := range []struct{ a, b, want int }{{1, 2, 3}, {-1, 1, 0}, {0, 0, 0}} {
		if got := Add(c.a, c.b); got != c.want {
			t.Errorf("Add(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestFib(t *testing.T) {
	if got := Fib(30); got != 832040 {
		t.Fatalf("Fib(30) = %d", got)
	}
}

func TestWords(t *testing.T) {
	b, err := os.ReadFile("../d000/f000.txt")
	if err != nil {
		t.Fatal(err)
	}
	if Words(string(b)) != 1 {
		t.Fatalf("Words(%q) != 1", b)
	}
}

// TestReport writes a report beside the package, as test runners write
// their caches and reports into the project; BENCH_RUN, read here, makes
// each run's result new to go test's cache.
func TestReport(t *testing.T) {
	report := fmt.Sprintf("run %s: ok\n", os.Getenv("BENCH_RUN"))
	if err := os.WriteFile("report.txt", []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
}
`
)

// writeRows runs the two rows with a daemon of their own (bin's) on a
// manifest in work/writes, and adds them to the goals table.
func writeRows(work, bin string, cacheN, changesetN int, space time.Duration) {
	base := filepath.Join(work, "writes")
	proj := filepath.Join(base, "proj")
	src := filepath.Join(base, "cs", "src")
	// bwrap's cache: on a tmpfs, as sluice's caches are, where there is one.
	bwCache := filepath.Join(work, "bwrap-cache")
	var fs unix.Statfs_t
	if unix.Statfs("/dev/shm", &fs) == nil && fs.Type == unix.TMPFS_MAGIC {
		bwCache = filepath.Join("/dev/shm", filepath.Base(work)+"-gocache")
	}
	for _, d := range []string{proj, src, bwCache} {
		check(os.MkdirAll(d, 0o755))
	}
	defer os.RemoveAll(bwCache)
	t0 := time.Now()
	writeTree(proj)
	check(os.MkdirAll(filepath.Join(proj, "calc"), 0o755))
	for name, text := range map[string]string{"go.mod": benchGoMod, "calc/calc.go": benchCalcGo, "calc/calc_test.go": benchCalcTestGo} {
		check(os.WriteFile(filepath.Join(proj, name), []byte(text), 0o644))
	}
	fmt.Printf("\nwrites: project of %s files made in %.1f s at %s\n", thousands(treeDirs*treeFiles+3), time.Since(t0).Seconds(), proj)

	const cacheDest = "/root/.cache"
	goEnv := map[string]string{"GOCACHE": cacheDest + "/go-build", "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false"}
	testTool := map[string]any{"operation": "execute", "mounts": []string{"proj"}, "cwd": "proj", "pool": 0,
		"commands": []any{
			[]any{"/usr/bin/env", map[string]any{"regex": "BENCH_RUN=[0-9]{1,9}"}, goBin, "test", map[string]any{"one_of": []string{"./...", "./calc"}}},
			[]any{"/bin/true"},
		},
		"env":    goEnv,
		"writes": map[string]any{"roots": []string{"proj"}, "commit": "discard"},
		"cache":  []string{cacheDest}, "cache_mb": 2048,
		"timeout_ms": 300000, "memory_mb": 2048, "pids": 1024}
	csTool := func(commit string) map[string]any {
		return map[string]any{"operation": "execute", "mounts": []string{"cs"}, "cwd": "cs/src", "pool": 2,
			"commands": []any{[]any{"sh", "-c", map[string]any{"any": true}, map[string]any{"rest": map[string]any{"any": true}}}},
			"writes":   map[string]any{"roots": []string{"cs/src"}, "commit": commit}}
	}
	mb, err := json.Marshal(map[string]any{"schema_version": 1, "tools": map[string]any{
		"w_gotest": testTool, "w_auto": csTool("auto"), "w_discard": csTool("discard")}})
	check(err)
	manifest := filepath.Join(base, "writes.json")
	check(os.WriteFile(manifest, mb, 0o644))
	dm := startDaemon(bin, manifest, work, "w-")
	defer dm.stop()
	time.Sleep(time.Second) // the changeset tools' pools fill

	if cacheN > 0 {
		testRunRow(dm, proj, bwCache, cacheDest, goEnv, cacheN)
	}
	if changesetN > 0 {
		changesetRow(dm, src, changesetN, space)
	}
}

// writeTree fills dir with treeDirs directories of treeFiles small files.
func writeTree(dir string) {
	for i := range treeDirs {
		d := filepath.Join(dir, fmt.Sprintf("d%03d", i))
		check(os.MkdirAll(d, 0o755))
		for j := range treeFiles {
			check(os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d.txt", j)), []byte(fmt.Sprintf("%d/%d\n", i, j)), 0o644))
		}
	}
}

// callArgv calls tool on d with argv and returns its result; a failed
// call ends the run.
func callArgv(d *daemon, tool string, argv []string) *api.CallResult {
	args, err := json.Marshal(map[string]any{"argv": argv})
	check(err)
	res, err := d.c.Call(context.Background(), api.CallRequest{Tool: tool, Args: args})
	if err == nil && !res.OK {
		out := ""
		if res.Output != nil {
			out = *res.Output
		}
		err = fmt.Errorf("%s %q: %s %s%s", tool, argv, res.Reason, out, res.Stderr)
	}
	check(err)
	return res
}

// testRunRow: go test ./... through sluice (writes discard, cache) and
// through bwrap --bind, and /bin/true through each, interleaved.
func testRunRow(dm *daemon, proj, bwCache, cacheDest string, goEnv map[string]string, n int) {
	env := []string{"PATH=" + sandbox.DefaultPath, "LANG=C.UTF-8", "HOME=/tmp"}
	keys := make([]string, 0, len(goEnv))
	for k := range goEnv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+goEnv[k])
	}
	bwrap := []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
		"--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--bind", proj, proj, "--bind", bwCache, cacheDest, "--clearenv"}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		bwrap = append(bwrap, "--setenv", k, v)
	}
	bwrap = append(bwrap, "--chdir", proj)
	seq := 0
	goTest := func(pkgs string) []string {
		seq++
		return []string{"/usr/bin/env", "BENCH_RUN=" + strconv.Itoa(seq), goBin, "test", pkgs}
	}
	bw := func(argv ...string) string {
		return runOut("bwrap", append(bwrap[:len(bwrap):len(bwrap)], argv...), nil, "")
	}
	// bwrap again, from a CPU cgroup of its own beside the root's tasks,
	// as sluice's containers are (all in one group, /sluice): what the
	// host's sharing of its CPUs does to a cgroup under load, apart
	// from the sandbox.
	grp, err := cpuGroup(fmt.Sprintf("sluice-bench-bwrap-%d", os.Getpid()))
	if err != nil {
		fmt.Printf("(no bwrap-in-a-cgroup column: %v)\n", err)
	} else {
		defer os.Remove(grp)
		stopDaemons = append(stopDaemons, func() { os.Remove(grp) }) // when a check fails
	}
	bwGrp := func(argv ...string) string {
		sh := []string{"-c", `echo $$ > "$0/cgroup.procs" && exec bwrap "$@"`, grp}
		return runOut("sh", append(append(sh, bwrap...), argv...), nil, "")
	}
	// Each run must have run the test (not "(cached)") and passed.
	ran := func(side, out string) error {
		if !strings.Contains(out, "ok  \tbenchproj/calc") || strings.Contains(out, "(cached)") {
			return fmt.Errorf("go test through %s did not run the test afresh:\n%s", side, out)
		}
		return nil
	}
	var changes []int
	fns := []timed{
		{run: func() error {
			res := callArgv(dm, "w_gotest", goTest("./..."))
			changes = append(changes, len(res.Changes))
			return ran("sluice", deref(res.Output))
		}},
		{run: func() error { return ran("bwrap", bw(goTest("./...")...)) }},
		{run: func() error { callArgv(dm, "w_gotest", []string{"/bin/true"}); return nil }},
		{run: func() error { bw("/bin/true"); return nil }},
		// The package alone: no walk of the 10,000 files.
		{run: func() error { return ran("sluice", deref(callArgv(dm, "w_gotest", goTest("./calc")).Output)) }},
		{run: func() error { return ran("bwrap", bw(goTest("./calc")...)) }},
	}
	if grp != "" {
		fns = append(fns, timed{run: func() error { return ran("bwrap in a cgroup", bwGrp(goTest("./...")...)) }})
	}
	t0 := time.Now()
	lat := interleave(fns, n)
	sl, bwr, slTrue, bwTrue, slPkg, bwPkg := pct(lat[0], 50), pct(lat[1], 50), pct(lat[2], 50), pct(lat[3], 50), pct(lat[4], 50), pct(lat[5], 50)
	fmt.Printf("\ngo test ./... in a %s-file project, its test writing a report, writing go's test cache (warm build cache), %d calls a side, interleaved (%.0f s; p50/p95 ms)\n",
		thousands(treeDirs*treeFiles+3), n, time.Since(t0).Seconds())
	fmt.Printf("%-52s %9.1f %9.1f\n", "sluice: writes (discard) + cache, cold box", ms(sl), ms(pct(lat[0], 95)))
	fmt.Printf("%-52s %9.1f %9.1f\n", "bwrap --bind project, --bind cache", ms(bwr), ms(pct(lat[1], 95)))
	fmt.Printf("%-52s %9.1f %9.1f\n", "sluice: /bin/true, same tool", ms(slTrue), ms(pct(lat[2], 95)))
	fmt.Printf("%-52s %9.1f %9.1f\n", "bwrap: /bin/true, same binds", ms(bwTrue), ms(pct(lat[3], 95)))
	fmt.Printf("%-52s %9.1f %9.1f\n", "sluice: go test ./calc (no walk of the tree)", ms(slPkg), ms(pct(lat[4], 95)))
	fmt.Printf("%-52s %9.1f %9.1f\n", "bwrap: go test ./calc", ms(bwPkg), ms(pct(lat[5], 95)))
	grpNote := ""
	if grp != "" {
		bwG := pct(lat[6], 50)
		fmt.Printf("%-52s %9.1f %9.1f\n", "bwrap in a CPU cgroup of its own: go test ./...", ms(bwG), ms(pct(lat[6], 95)))
		grpNote = fmt.Sprintf("; bwrap from a CPU cgroup of its own, as sluice's containers: %.1f ms, sluice %.2f× that", ms(bwG), float64(sl)/float64(bwG))
	}
	sort.Ints(changes)
	fmt.Printf("bwrap's cache: %s; changes a sluice go test call listed (and discarded): %d\n", bwCache, changes[len(changes)/2])
	// sluiced's own CPU a go test ./... call (its FUSE view serving the
	// walk, the box, reading the scratch layer), over a few more calls.
	dm.calibrate()
	const k = 3
	cpu0, scrapes0 := cpuTime(dm), dm.scrapes
	for range k {
		check(ran("sluice", deref(callArgv(dm, "w_gotest", goTest("./...")).Output)))
	}
	cpu := dm.cpuCalls(cpu0, scrapes0, k)
	fmt.Printf("sluiced's CPU a go test ./... call: %.0f ms\n", ms(cpu))
	ratioGoal("a test run writing caches: go test ./..., 10,000-file project, writes commit discard + cache, p50", sl, bwr, "bwrap --bind", 1.3)
	infoRow("the same, where the time goes (p50)",
		fmt.Sprintf("the box alone (/bin/true, same tool and binds): sluice %.1f ms, bwrap %.1f ms; go test ./calc, no walk of the tree: %.2f× (%.1f vs %.1f ms); the walk of ./...: sluice %.1f ms, bwrap %.1f ms; sluiced's CPU a call %.0f ms%s",
			ms(slTrue), ms(bwTrue), float64(slPkg)/float64(bwPkg), ms(slPkg), ms(bwPkg), ms(sl-slPkg), ms(bwr-bwPkg), ms(cpu), grpNote))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// changesetRow: a command writing 200 files of 4 KiB in a fresh
// directory, committed (auto) and discarded, and the floor, interleaved.
func changesetRow(dm *daemon, src string, n int, space time.Duration) {
	block := strings.Repeat("0123456789abcde\n", 256)
	seq := 0
	cmd := func(tool string, commit bool) func() error {
		return func() error {
			seq++
			script := fmt.Sprintf(`mkdir d%d && cd d%d && i=0; while [ $i -lt 200 ]; do printf '%%s' "$0" > f$i; i=$((i+1)); done`, seq, seq)
			res := callArgv(dm, tool, []string{"sh", "-c", script, block})
			if len(res.Changes) != 201 || (res.Committed != nil && *res.Committed) != commit {
				return fmt.Errorf("%s: %d changes (want 201), committed %v (want %v)", tool, len(res.Changes), res.Committed, commit)
			}
			return nil
		}
	}
	floor := func() error {
		seq++
		dir := filepath.Join(src, fmt.Sprintf("floor%d", seq))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		for j := range 200 {
			tmp := filepath.Join(dir, fmt.Sprintf(".t%d", j))
			f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			if _, err = f.WriteString(block); err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("f%d", j)))
			}
			if err != nil {
				return err
			}
		}
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		return unix.Fsync(int(d.Fd()))
	}
	fns := []timed{
		{run: cmd("w_auto", true), after: func() { dm.settle("w_auto") }},
		{run: cmd("w_discard", false), after: func() { dm.settle("w_discard") }},
		{run: floor},
	}
	t0 := time.Now()
	lat := interleave(fns, n)
	auto, disc, fl := pct(lat[0], 50), pct(lat[1], 50), pct(lat[2], 50)
	fmt.Printf("\na changeset of 200 files × 4 KiB in a fresh directory, %d calls each, interleaved, spaced %v apart (%.0f s; p50/p95 ms)\n",
		n, space, time.Since(t0).Seconds())
	fmt.Printf("%-52s %9.1f %9.1f\n", "sluice, pooled, commit auto", ms(auto), ms(pct(lat[0], 95)))
	fmt.Printf("%-52s %9.1f %9.1f\n", "sluice, pooled, commit discard", ms(disc), ms(pct(lat[1], 95)))
	fmt.Printf("%-52s %9.1f %9.1f\n", "floor: write+fsync+rename ×200, dir fsync", ms(fl), ms(pct(lat[2], 95)))
	// Where the time goes, over a few more calls one at a time: the
	// ledger syncs each kind of call waits for, and sluiced's CPU a call
	// (its pool's refill included, settle's metrics reads taken out)
	// beside the CPU this process spends on the floor.
	dm.calibrate()
	const k = 8
	var per []string
	for _, t := range []struct {
		tool   string
		commit bool
	}{{"w_auto", true}, {"w_discard", false}} {
		m0, err0 := dm.metrics()
		cpu0, scrapes0 := cpuTime(dm), dm.scrapes
		for range k {
			check(cmd(t.tool, t.commit)())
			dm.settle(t.tool)
			time.Sleep(space)
		}
		cpu := dm.cpuCalls(cpu0, scrapes0, k)
		m1, err1 := dm.metrics()
		syncs := "?"
		if dm.metricsAddr != "" && err0 == nil && err1 == nil {
			const key = "sluice_audit_sync_seconds_count"
			syncs = fmt.Sprintf("%.1f", (m1[key]-m0[key])/k)
		}
		per = append(per, fmt.Sprintf("%s %s ledger syncs, sluiced CPU %.0f ms", strings.TrimPrefix(t.tool, "w_"), syncs, ms(cpu)))
	}
	var r0, r1 unix.Rusage
	check(unix.Getrusage(unix.RUSAGE_SELF, &r0))
	for range k {
		check(floor())
	}
	check(unix.Getrusage(unix.RUSAGE_SELF, &r1))
	floorCPU := time.Duration(r1.Utime.Nano()+r1.Stime.Nano()-r0.Utime.Nano()-r0.Stime.Nano()) / k
	where := fmt.Sprintf("a call: %s; the floor's CPU %.0f ms", strings.Join(per, "; "), ms(floorCPU))
	fmt.Println(where)
	ratioGoal("a changeset of 200 files × 4 KiB committed (auto), p50", auto, fl, "write+fsync+rename", 2.0)
	infoRow("the same, discard (the command and reading its changeset), p50",
		fmt.Sprintf("%.2f× write+fsync+rename (%.1f ms); the commit's own share, auto − discard: %.1f ms = %.2f× the floor",
			float64(disc)/float64(fl), ms(disc), ms(auto-disc), float64(auto-disc)/float64(fl)))
	infoRow("the same, where the time goes", where)
}

// thousands writes n with a comma between its thousands (n < 1,000,000).
func thousands(n int) string {
	if n < 1000 {
		return strconv.Itoa(n)
	}
	return fmt.Sprintf("%d,%03d", n/1000, n%1000)
}

// cpuGroup makes a cgroup named name in the CPU controller's hierarchy
// (cgroup v1's cpu hierarchy, or the cgroup v2 root when it offers cpu),
// a sibling of sluice's own, and returns its directory.
func cpuGroup(name string) (string, error) {
	roots, err := cgroupRoots()
	if err != nil {
		return "", err
	}
	dir := ""
	for _, r := range roots {
		if slices.Contains(strings.Split(filepath.Base(r), ","), "cpu") {
			dir = r
		}
	}
	if dir == "" {
		if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && slices.Contains(strings.Fields(string(b)), "cpu") {
			dir = "/sys/fs/cgroup"
		}
	}
	if dir == "" {
		return "", fmt.Errorf("no cgroup hierarchy with the cpu controller")
	}
	g := filepath.Join(dir, name)
	if err := os.Mkdir(g, 0o755); err != nil {
		return "", err
	}
	return g, nil
}
