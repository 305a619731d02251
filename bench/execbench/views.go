//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/fsview"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/sandbox"
)

// The view against bwrap. sluiced (--bin) serves each execute tool's
// mounts through a FUSE view that decides every lookup; bwrap --ro-bind
// of the same tree, with the same command, environment and working
// directory, is what the view's goals are stated against. Optionally an
// older sluiced (--bin-old, e.g. the build that bind-mounted the mounts)
// and the rivals (--rivals: codex sandbox, srt) run beside them. Each row
// calls the same tool on every side, sample by sample, rotating which side
// goes first, so that machine noise lands on all alike.

const (
	treeDirs, treeFiles = 100, 100 // the 10,000-file tree
	bigBytes            = 32 << 20 // the passthrough check's file
)

// never is the list every sluice tool of the comparison carries, so that
// the view has names to hide (and an old build's mask walk has work).
var never = []string{".env", "*.pem", "private/**"}

// vtool is one tool of the comparison: its manifest entry for sluiced,
// and what bwrap and the rivals run for it (argv in base/cwd, with the
// mounts bound read-only at the same paths and PATH plus env as the only
// environment).
type vtool struct {
	argv   []string
	mounts []string // relative to base
	cwd    string   // relative to base
	pool   int
	env    map[string]string
	extra  map[string]any // more manifest fields
}

func (t vtool) manifest() map[string]any {
	m := map[string]any{"operation": "execute", "commands": [][]string{t.argv}, "mounts": t.mounts,
		"cwd": t.cwd, "pool": t.pool, "never": never}
	if t.env != nil {
		m["env"] = t.env
	}
	for k, v := range t.extra {
		m[k] = v
	}
	return m
}

// environ is the whole environment of t's command: what sluiced gives a
// container (PATH, then the tool's env).
func (t vtool) environ() []string {
	env := []string{"PATH=" + sandbox.DefaultPath}
	keys := make([]string, 0, len(t.env))
	for k := range t.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+t.env[k])
	}
	return env
}

// bwrapArgs is bwrap's command line for t: every namespace unshared, /usr
// and t's mounts bound read-only at the same paths, a fresh /proc, /dev
// and /tmp, t's environment only.
func (t vtool) bwrapArgs(base string) []string {
	a := []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
		"--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--clearenv"}
	for _, m := range t.mounts {
		p := filepath.Join(base, m)
		a = append(a, "--ro-bind", p, p)
	}
	for _, kv := range t.environ() {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	a = append(a, "--chdir", filepath.Join(base, t.cwd))
	return append(a, t.argv...)
}

// side is one way of running the comparison's tools.
type side struct {
	name string
	d    *daemon                // a sluiced, or nil
	has  func(tool string) bool // nil: every tool
	run  func(tool string) string
}

type viewRow struct {
	label  string
	tool   string
	period time.Duration // least time from one call's end to the next call of the same tool on the same side
	before func(seq int) // if set, runs (untimed) before every call
	check  func(side, out string) error
	// goal, if > 0, is the most the view's p50 may be, as a multiple of
	// bwrap's; such rows go to the goals table, the others as context.
	goal float64
}

func viewRows(work, binOld, binNew, demo string, n int, space time.Duration, rivals string) {
	base := filepath.Join(work, "views")
	t0 := time.Now()
	tree := makeViewWorkspace(base, demo)
	fmt.Printf("\nview workspace made in %.1f s: %d-file git tree at %s\n", time.Since(t0).Seconds(), treeDirs*treeFiles, tree)

	abs := func(rel string) string { return filepath.Join(base, rel) }
	exe := func(argv []string, mount string, pool int) vtool {
		return vtool{argv: argv, mounts: []string{mount}, cwd: mount, pool: pool}
	}
	git := func() vtool {
		t := exe([]string{"git", "status"}, "tree", 2)
		// The container's uid is not the tree's owner: safe.directory,
		// given through the environment since HOME (/tmp) has no config.
		t.env = map[string]string{"HOME": "/tmp", "GIT_CONFIG_COUNT": "1",
			"GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}
		return t
	}
	find := func() vtool { return exe([]string{"sh", "-c", "find . | wc -l"}, "tree", 2) }
	tools := map[string]vtool{
		"v_cold_small": exe([]string{"/bin/true"}, "small", 0),
		"v_cold":       exe([]string{"/bin/true"}, "tree", 0),
		"v_pool":       exe([]string{"/bin/true"}, "tree", 2),
		"v_cat":        exe([]string{"cat", abs("tree/four_k.txt")}, "tree", 2),
		"v_find":       find(),
		"v_find_exp":   find(),
		"v_find_mod":   find(),
		"v_git":        git(),
		"v_git_exp":    git(),
		"v_git_mod":    git(),
		// The demo's run_tests, as profiles/examples/manifest.json has it.
		"v_unittest": {argv: []string{"python3", "-m", "unittest", "discover", "-s", "tests", "-v"},
			mounts: []string{"workspace/src", "workspace/tests"}, cwd: "workspace", pool: 2,
			env:   map[string]string{"PYTHONDONTWRITEBYTECODE": "1"},
			extra: map[string]any{"timeout_ms": 20000, "memory_mb": 256, "pids": 64, "max_bytes": 16384}},
		"v_big": exe([]string{"sh", "-c", "cat " + abs("big/big.bin") + " | wc -c"}, "big", 0),
	}
	mt := map[string]any{}
	for name, t := range tools {
		mt[name] = t.manifest()
	}
	mb, err := json.Marshal(map[string]any{"schema_version": 1, "tools": mt})
	check(err)
	manifest := filepath.Join(base, "views.json")
	check(os.WriteFile(manifest, mb, 0o644))

	cur := startDaemon(binNew, manifest, work, "new-")
	defer cur.stop()
	daemonSide := func(name string, d *daemon) side {
		return side{name: name, d: d, run: func(tool string) string { return call(d, tool) }}
	}
	sides := []side{
		{name: "bwrap", run: func(tool string) string { return runOut("bwrap", tools[tool].bwrapArgs(base), nil, "") }},
		daemonSide("view", cur),
	}
	if binOld != "" {
		old := startDaemon(binOld, manifest, work, "old-")
		defer old.stop()
		sides = append(sides, daemonSide("old", old))
	}
	if rivals != "" {
		sides = append(sides, rivalSides(rivals, base, tools)...)
	}
	time.Sleep(3 * time.Second) // the daemons' pools fill
	for _, s := range sides {
		if s.d != nil {
			s.d.calibrate()
			if s.d.scrapeCPU > 0 {
				fmt.Printf("\n%s: one read of sluiced's metrics costs it %.2f ms of CPU (taken out of its CPU/call)", s.name, ms(s.d.scrapeCPU))
			}
		}
	}
	fmt.Println()

	fmt.Printf("\nFUSE passthrough on this kernel (internal/fsview mounted here): %s\n", probePassthrough(work))
	// Who reads the bytes: through binds or a passthrough view, the
	// container does; through a view without passthrough, sluiced does.
	for _, s := range sides {
		if s.d == nil {
			continue
		}
		before := rchar(s.d)
		out := s.run("v_big")
		if strings.TrimSpace(out) != strconv.Itoa(bigBytes) {
			check(fmt.Errorf("v_big: read %q bytes, want %d", strings.TrimSpace(out), bigBytes))
		}
		fmt.Printf("%-6s sluiced read %.2f MiB itself while the container read %d MiB through the mount\n",
			s.name, float64(max(0, rchar(s.d)-before))/(1<<20), bigBytes>>20) // less than 0 when threads exited
	}

	counts := map[string]string{}
	findCheck := func(side, out string) error {
		if counts[side] == "" {
			counts[side] = strings.TrimSpace(out)
		}
		return nil
	}
	gitCheck := func(side, out string) error {
		if !strings.Contains(out, "nothing to commit") {
			return fmt.Errorf("git status through %s is not clean:\n%s", side, out)
		}
		return nil
	}
	rows := []viewRow{
		{label: "cold start, /bin/true, 1-file mount", tool: "v_cold_small"},
		{label: "cold start, /bin/true, 10,000-file mount", tool: "v_cold"},
		{label: "pooled start, /bin/true", tool: "v_pool", goal: 0.4},
		{label: "cat 4 KiB file", tool: "v_cat", goal: 0.5},
		{label: "find . | wc -l", tool: "v_find", check: findCheck, goal: 1.5},
	}
	// The "apart" rows wait out the kernel's cache of the view's names and
	// attributes, so that every name is looked up through sluiced again:
	// meaningful while that cache is short.
	expire := sandbox.ViewTimeout + 100*time.Millisecond
	apart := expire <= 10*time.Second
	if apart {
		rows = append(rows, viewRow{label: fmt.Sprintf("find . | wc -l, ≥%.1f s apart", expire.Seconds()), tool: "v_find_exp", period: expire})
	}
	rows = append(rows, viewRow{label: "git status", tool: "v_git", check: gitCheck, goal: 1.5})
	if apart {
		rows = append(rows, viewRow{label: fmt.Sprintf("git status, ≥%.1f s apart", expire.Seconds()), tool: "v_git_exp", period: expire, check: gitCheck})
	}
	// The modifying rows come after the others: the files they touch
	// stay newer than git's index, so git reads them again from then on.
	mutate := mutator(tree)
	rows = append(rows,
		viewRow{label: "find . | wc -l, tree changed before each call", tool: "v_find_mod", before: mutate},
		viewRow{label: "git status, tree changed before each call", tool: "v_git_mod", before: mutate, check: gitCheck},
		viewRow{label: "python3 -m unittest (demo)", tool: "v_unittest"},
	)
	if !apart {
		fmt.Printf("\n(no \"≥ cache expiry apart\" rows: the view's cache lasts %v)\n", sandbox.ViewTimeout)
	}

	names := make([]string, len(sides))
	for i, s := range sides {
		names[i] = s.name
	}
	fmt.Printf("\nthe FUSE view (%s) against bwrap --ro-bind of the same tree", binNew)
	if binOld != "" {
		fmt.Printf(" and an older sluiced (old: %s)", binOld)
	}
	fmt.Printf(": %d calls a row and side, interleaved (%s), %v pause after each (p50/p95 ms)\n",
		n, strings.Join(names, ", "), space)
	type stat struct {
		ok       bool
		p50, p95 time.Duration
		cpu      time.Duration
	}
	type result struct {
		row  viewRow
		st   []stat
		hits string // how the view's pooled calls fared
	}
	var results []result
	tStart := time.Now()
	const warm = 3
	for _, r := range rows {
		var in []int // the sides that run this row
		for i, s := range sides {
			if s.has == nil || s.has(r.tool) {
				in = append(in, i)
			}
		}
		lat := make([][]time.Duration, len(sides))
		last := make([]time.Time, len(sides))
		cpu0 := make([]time.Duration, len(sides))
		scrapes0 := make([]int, len(sides))
		for _, i := range in {
			if d := sides[i].d; d != nil {
				cpu0[i], scrapes0[i] = cpuTime(d), d.scrapes
			}
		}
		h0, m0 := cur.poolHits(r.tool)
		seq := 0
		for j := range n + warm {
			for k := range in {
				i := in[(j+k)%len(in)] // rotate which side goes first
				s := sides[i]
				if r.period > 0 {
					time.Sleep(time.Until(last[i].Add(r.period)))
				}
				if r.before != nil {
					r.before(seq)
					seq++
				}
				t := time.Now()
				out := s.run(r.tool)
				d := time.Since(t)
				if s.d != nil {
					s.d.settle(r.tool) // untimed: see settle.go
				}
				last[i] = time.Now()
				if r.check != nil {
					check(r.check(s.name, out))
				}
				if j >= warm {
					lat[i] = append(lat[i], d)
				}
				time.Sleep(space)
			}
		}
		h1, m1 := cur.poolHits(r.tool)
		res := result{row: r, st: make([]stat, len(sides)), hits: hitNote(h0, m0, h1, m1)}
		for _, i := range in {
			sort.Slice(lat[i], func(a, b int) bool { return lat[i][a] < lat[i][b] })
			st := stat{ok: true, p50: pct(lat[i], 50), p95: pct(lat[i], 95)}
			if d := sides[i].d; d != nil {
				st.cpu = d.cpuCalls(cpu0[i], scrapes0[i], n+warm)
			}
			res.st[i] = st
		}
		results = append(results, res)
		fmt.Printf("%-46s", r.label)
		for i, s := range sides {
			if res.st[i].ok {
				fmt.Printf("  %s %.2f/%.2f", s.name, ms(res.st[i].p50), ms(res.st[i].p95))
			}
		}
		if res.hits != "" && tools[r.tool].pool > 0 {
			fmt.Printf("  (view: %s)", res.hits)
		}
		fmt.Println()
	}
	fmt.Printf("(rows took %.0f s; after each call to a sluiced, its pool was let refill, untimed: %d waits gave up)\n",
		time.Since(tStart).Seconds(), cur.unsettled)
	fmt.Printf("\nfind . | wc -l counts:")
	for _, s := range sides {
		if c, ok := counts[s.name]; ok {
			fmt.Printf(" %s %s", s.name, c)
		}
	}
	fmt.Printf(" (the view hides the never-listed names; bwrap and the rivals show them, an old build's mask leaves them as names)\n")
	fmt.Printf("cpu includes refilling the row's pool, and for the view serving its lookups.\n")

	// The table in Markdown, for docs/performance.md: p50 and p95 of
	// every side, each other side's p50 over bwrap's, sluiced's CPU.
	var hdr, sep strings.Builder
	hdr.WriteString("| row (ms) |")
	sep.WriteString("| --- |")
	for _, s := range sides {
		fmt.Fprintf(&hdr, " %s p50 | %s p95 |", s.name, s.name)
		sep.WriteString(" ---: | ---: |")
	}
	for _, s := range sides[1:] {
		fmt.Fprintf(&hdr, " %s/bwrap p50 |", s.name)
		sep.WriteString(" ---: |")
	}
	for _, s := range sides {
		if s.d != nil {
			fmt.Fprintf(&hdr, " sluiced CPU/call, %s |", s.name)
			sep.WriteString(" ---: |")
		}
	}
	fmt.Printf("\n%s\n%s\n", hdr.String(), sep.String())
	for _, res := range results {
		fmt.Printf("| %s |", mdEscape(res.row.label))
		for i := range sides {
			if st := res.st[i]; st.ok {
				fmt.Printf(" %.2f | %.2f |", ms(st.p50), ms(st.p95))
			} else {
				fmt.Printf(" | |")
			}
		}
		b := res.st[0]
		for i := range sides[1:] {
			if st := res.st[i+1]; st.ok {
				fmt.Printf(" %.2f× |", float64(st.p50)/float64(b.p50))
			} else {
				fmt.Printf(" |")
			}
		}
		for i, s := range sides {
			if s.d != nil {
				fmt.Printf(" %.0f |", ms(res.st[i].cpu))
			}
		}
		fmt.Println()
	}

	// The goals: the view's p50 as a multiple of bwrap's on the rows that
	// have one; the other rows, and the view against the rivals, as
	// context (an old build's ratios are in the table above).
	for _, res := range results {
		v, b := res.st[1], res.st[0]
		label := "view: " + res.row.label
		if res.row.goal > 0 {
			ratioGoal(label+", p50", v.p50, b.p50, "bwrap", res.row.goal)
		} else {
			infoRow(label+", p50", fmt.Sprintf("%.2f× bwrap (%.2f ms vs %.2f ms)", float64(v.p50)/float64(b.p50), ms(v.p50), ms(b.p50)))
		}
		for i, s := range sides {
			if st := res.st[i]; st.ok && i >= 2 && s.name != "old" {
				infoRow(fmt.Sprintf("view against %s: %s, p50", s.name, res.row.label),
					fmt.Sprintf("%.2f× %s (%.2f ms vs %.2f ms)", float64(v.p50)/float64(st.p50), s.name, ms(v.p50), ms(st.p50)))
			}
		}
	}
}

// mutator returns what the "tree changed" rows do on the host before each
// call: touch four files in four directories, rename a file away and back,
// create a file and remove it. The tree's names and contents end as they
// were; its attributes and directories changed, so whatever the view
// caches of them must be dropped or found stale.
func mutator(tree string) func(seq int) {
	return func(seq int) {
		now := time.Now()
		for k := range 4 {
			p := filepath.Join(tree, fmt.Sprintf("d%03d", (seq*4+k)%treeDirs), fmt.Sprintf("f%03d.txt", (seq/treeDirs+k*7)%treeFiles))
			check(os.Chtimes(p, now, now))
		}
		d := filepath.Join(tree, fmt.Sprintf("d%03d", (seq*7+3)%treeDirs))
		a, b := filepath.Join(d, "f050.txt"), filepath.Join(d, "f050.txt.moved")
		check(os.Rename(a, b))
		check(os.Rename(b, a))
		tmp := filepath.Join(d, "new.tmp")
		check(os.WriteFile(tmp, []byte("new\n"), 0o644))
		check(os.Remove(tmp))
	}
}

// runOut runs name with args (env nil: this process's, dir "": ours) and
// returns its standard output; a failure ends the run.
func runOut(name string, args, env []string, dir string) string {
	cmd := exec.Command(name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Env, cmd.Dir = &out, &errb, env, dir
	if err := cmd.Run(); err != nil {
		check(fmt.Errorf("%s: %v: %s%s", name, err, out.String(), errb.String()))
	}
	return out.String()
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// call runs tool on d and returns its output; a failed call ends the run.
func call(d *daemon, tool string) string {
	res, err := d.c.Call(context.Background(), api.CallRequest{Tool: tool})
	if err == nil && !res.OK {
		err = fmt.Errorf("%s: %s %s", tool, res.Reason, res.Stderr)
	}
	check(err)
	if res.Output != nil {
		return *res.Output
	}
	return ""
}

// makeViewWorkspace lays out base: small/ (one file), tree/ (treeDirs ×
// treeFiles files of a few bytes, never-listed files here and there, and
// four_k.txt, committed to git with everything dated an hour back so no
// index entry is racily clean), big/ and a copy of the demo workspace.
func makeViewWorkspace(base, demo string) string {
	fourK := bytes.Repeat([]byte("0123456789abcde\n"), 256)
	small, tree, big := filepath.Join(base, "small"), filepath.Join(base, "tree"), filepath.Join(base, "big")
	for _, d := range []string{small, tree, big, filepath.Join(tree, "private")} {
		check(os.MkdirAll(d, 0o755))
	}
	check(os.WriteFile(filepath.Join(small, "four_k.txt"), fourK, 0o644))
	check(os.WriteFile(filepath.Join(tree, "four_k.txt"), fourK, 0o644))
	writeTree(tree)
	for i := 0; i < treeDirs; i += 10 { // secrets the old build masks and the view hides
		dir := filepath.Join(tree, fmt.Sprintf("d%03d", i))
		check(os.WriteFile(filepath.Join(dir, ".env"), []byte("TOKEN=BENCH-SECRET\n"), 0o600))
		check(os.WriteFile(filepath.Join(dir, "id.pem"), []byte("BENCH-SECRET-KEY\n"), 0o600))
	}
	check(os.WriteFile(filepath.Join(tree, ".env"), []byte("TOKEN=BENCH-SECRET\n"), 0o600))
	for j := range 10 {
		check(os.WriteFile(filepath.Join(tree, "private", fmt.Sprintf("key%d", j)), []byte("BENCH-SECRET\n"), 0o600))
	}
	check(os.WriteFile(filepath.Join(tree, ".gitignore"), []byte(".env\n*.pem\n/private/\n"), 0o644))
	past := time.Now().Add(-time.Hour)
	check(filepath.Walk(tree, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, past, past)
	}))
	gitEnv := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@localhost", "GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@localhost")
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-qm", "tree"}, {"gc", "-q"}} {
		cmd := exec.Command("git", append([]string{"-c", "gc.auto=0"}, args...)...) // no gc in the background
		cmd.Dir, cmd.Env = tree, gitEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			check(fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out))
		}
	}
	// The daemons start later: by then the index is older than the files'
	// second, so git need not read any file to call it clean.
	f, err := os.Create(filepath.Join(big, "big.bin"))
	check(err)
	check(f.Truncate(bigBytes))
	check(f.Close())
	if out, err := exec.Command("cp", "-a", demo, filepath.Join(base, "workspace")).CombinedOutput(); err != nil {
		check(fmt.Errorf("copy the demo workspace %s: %v: %s", demo, err, out))
	}
	return tree
}

// probePassthrough mounts a view here, the way sluiced does, and reports
// whether the kernel agreed to FUSE passthrough.
func probePassthrough(work string) string {
	dir, mnt := filepath.Join(work, "probe"), filepath.Join(work, "probe-mnt")
	check(os.MkdirAll(dir, 0o755))
	check(os.MkdirAll(mnt, 0o755))
	root, err := securefs.OpenRoot(dir, securefs.ModeAuto)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	v, err := fsview.Mount(mnt, []fsview.Source{{Root: root}}, fsview.Options{})
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer func() {
		v.Close()
		<-v.Done()
	}()
	return strconv.FormatBool(v.Passthrough)
}

// rchar is how many bytes d's live threads have read with read(2) and
// kin. Not /proc/PID/io: that also counts the reaped children's reads,
// and the container's processes are d's children.
func rchar(d *daemon) int64 {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/io", d.cmd.Process.Pid))
	check(err)
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread is gone
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "rchar: "); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				check(err)
				sum += n
			}
		}
	}
	return sum
}

// cpuTime is d's user+system CPU time so far (its container inits are
// children that exec away; this is the daemon itself).
func cpuTime(d *daemon) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.cmd.Process.Pid))
	check(err)
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64) // utime is field 14, state field 3
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}
