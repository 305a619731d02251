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

// The view-against-binds comparison. Two daemons run on one manifest and
// one workspace: binOld (which bind-mounted each tool's mounts into the
// container and masked never-listed paths by walking the tree at
// container creation) and binNew (which serves the mounts through a FUSE
// view that decides every lookup). Each row calls the same tool on both,
// sample by sample, alternating which goes first, so that machine noise
// lands on both alike.

const (
	treeDirs, treeFiles = 100, 100 // the 10,000-file tree
	bigBytes            = 32 << 20 // the passthrough check's file
)

// never is the list every tool of the comparison carries, so that the old
// build's mask walk has work to do and the view has names to hide.
var never = []string{".env", "*.pem", "private/**"}

type viewRow struct {
	label  string
	tool   string
	period time.Duration // least time from one call's end to the next call of the same tool on the same daemon
	// per[side], if set, checks the output of a call on sides[side].
	per [2]func(out string) error
}

func viewRows(work, binOld, binNew, demo string, n int, space time.Duration) {
	base := filepath.Join(work, "views")
	t0 := time.Now()
	tree := makeViewWorkspace(base, demo)
	fmt.Printf("\nview workspace made in %.1f s: %d-file git tree at %s\n", time.Since(t0).Seconds(), treeDirs*treeFiles, tree)

	abs := func(rel string) string { return filepath.Join(base, rel) }
	type tool = map[string]any
	exe := func(argv []string, mounts []string, cwd string, pool int) tool {
		return tool{"operation": "execute", "commands": [][]string{argv}, "mounts": mounts, "cwd": cwd, "pool": pool, "never": never}
	}
	git := func() tool {
		t := exe([]string{"git", "status"}, []string{"tree"}, "tree", 2)
		// The container's uid is not the tree's owner: safe.directory,
		// given through the environment since HOME (/tmp) has no config.
		t["env"] = map[string]string{"HOME": "/tmp", "GIT_CONFIG_COUNT": "1",
			"GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}
		return t
	}
	unittest := func() tool {
		// The demo's run_tests, as profiles/examples/manifest.json has it.
		t := exe([]string{"python3", "-m", "unittest", "discover", "-s", "tests", "-v"},
			[]string{"workspace/src", "workspace/tests"}, "workspace", 2)
		t["env"] = map[string]string{"PYTHONDONTWRITEBYTECODE": "1"}
		t["timeout_ms"], t["memory_mb"], t["pids"], t["max_bytes"] = 20000, 256, 64, 16384
		return t
	}
	tools := map[string]tool{
		"v_cold_small": exe([]string{"/bin/true"}, []string{"small"}, "small", 0),
		"v_cold":       exe([]string{"/bin/true"}, []string{"tree"}, "tree", 0),
		"v_pool":       exe([]string{"/bin/true"}, []string{"tree"}, "tree", 2),
		"v_cat":        exe([]string{"cat", abs("tree/four_k.txt")}, []string{"tree"}, "tree", 2),
		"v_find":       exe([]string{"sh", "-c", "find . | wc -l"}, []string{"tree"}, "tree", 2),
		"v_find_exp":   exe([]string{"sh", "-c", "find . | wc -l"}, []string{"tree"}, "tree", 2),
		"v_git":        git(),
		"v_git_exp":    git(),
		"v_unittest":   unittest(),
		"v_big":        exe([]string{"sh", "-c", "cat " + abs("big/big.bin") + " | wc -c"}, []string{"big"}, "big", 0),
	}
	mb, err := json.Marshal(map[string]any{"schema_version": 1, "tools": tools})
	check(err)
	manifest := filepath.Join(base, "views.json")
	check(os.WriteFile(manifest, mb, 0o644))

	old := startDaemon(binOld, manifest, work, "old-")
	defer old.stop()
	cur := startDaemon(binNew, manifest, work, "new-")
	defer cur.stop()
	sides := []*daemon{old, cur}
	time.Sleep(3 * time.Second) // both daemons' pools fill

	fmt.Printf("\nFUSE passthrough on this kernel (internal/fsview mounted here): %s\n", probePassthrough(work))
	// Who reads the bytes: through binds or a passthrough view, the
	// container does; through a view without passthrough, sluiced does.
	for i, d := range sides {
		before := rchar(d)
		out := call(d, "v_big")
		if strings.TrimSpace(out) != strconv.Itoa(bigBytes) {
			check(fmt.Errorf("v_big: read %q bytes, want %d", strings.TrimSpace(out), bigBytes))
		}
		fmt.Printf("%-6s sluiced read %.2f MiB itself while the container read %d MiB through the mount\n",
			sideName[i], float64(rchar(d)-before)/(1<<20), bigBytes>>20)
	}

	counts := [2]string{}
	findCheck := func(side int) func(string) error {
		return func(out string) error {
			if counts[side] == "" {
				counts[side] = strings.TrimSpace(out)
			}
			return nil
		}
	}
	gitCheck := func(side int) func(string) error {
		return func(out string) error {
			if !strings.Contains(out, "nothing to commit") {
				return fmt.Errorf("git status through the %s is not clean:\n%s", sideName[side], out)
			}
			return nil
		}
	}
	// The "≥1.1 s apart" rows wait out the kernel's cache of the view's
	// names and attributes, so that every name is looked up through
	// sluiced again.
	expire := sandbox.ViewTimeout + 100*time.Millisecond
	rows := []viewRow{
		{label: "cold start, /bin/true, 1-file mount", tool: "v_cold_small"},
		{label: "cold start, /bin/true, 10,000-file mount", tool: "v_cold"},
		{label: "pooled start, /bin/true", tool: "v_pool"},
		{label: "cat 4 KiB file", tool: "v_cat"},
		{label: "find . | wc -l", tool: "v_find", per: [2]func(string) error{findCheck(0), findCheck(1)}},
		{label: "find . | wc -l, ≥1.1 s apart", tool: "v_find_exp", period: expire},
		{label: "git status", tool: "v_git", per: [2]func(string) error{gitCheck(0), gitCheck(1)}},
		{label: "git status, ≥1.1 s apart", tool: "v_git_exp", period: expire},
		{label: "python3 -m unittest (demo)", tool: "v_unittest"},
	}
	fmt.Printf("\nFUSE view (%s) against direct binds (%s): %d calls each, interleaved, spaced %v apart (ms; cpu = sluiced CPU per call)\n",
		binNew, binOld, n, space)
	fmt.Printf("%-40s %9s %9s %9s %9s %7s %7s %9s %9s\n", "", "binds p50", "binds p95", "view p50", "view p95",
		"p50 ×", "p95 ×", "binds cpu", "view cpu")
	type result struct {
		label      string
		b50, b95   time.Duration
		v50, v95   time.Duration
		bcpu, vcpu time.Duration
	}
	var results []result
	tStart := time.Now()
	for _, r := range rows {
		lat := [2][]time.Duration{}
		last := [2]time.Time{}
		cpu0 := [2]time.Duration{cpuTime(old), cpuTime(cur)}
		const warm = 3
		for i := range n + warm {
			for k := range 2 {
				side := (i + k) % 2 // alternate which daemon goes first
				if r.period > 0 {
					time.Sleep(time.Until(last[side].Add(r.period)))
				}
				t := time.Now()
				out := call(sides[side], r.tool)
				d := time.Since(t)
				last[side] = time.Now()
				if r.per[side] != nil {
					check(r.per[side](out))
				}
				if i >= warm {
					lat[side] = append(lat[side], d)
				}
				time.Sleep(space)
			}
		}
		calls := time.Duration(n + warm)
		res := result{label: r.label,
			bcpu: (cpuTime(old) - cpu0[0]) / calls, vcpu: (cpuTime(cur) - cpu0[1]) / calls}
		for k := range 2 {
			sort.Slice(lat[k], func(i, j int) bool { return lat[k][i] < lat[k][j] })
		}
		res.b50, res.b95, res.v50, res.v95 = pct(lat[0], 50), pct(lat[0], 95), pct(lat[1], 50), pct(lat[1], 95)
		results = append(results, res)
		fmt.Printf("%-40s %9.2f %9.2f %9.2f %9.2f %7.2f %7.2f %9.2f %9.2f\n", r.label,
			ms(res.b50), ms(res.b95), ms(res.v50), ms(res.v95),
			float64(res.v50)/float64(res.b50), float64(res.v95)/float64(res.b95), ms(res.bcpu), ms(res.vcpu))
	}
	fmt.Printf("(rows took %.0f s)\n", time.Since(tStart).Seconds())
	fmt.Printf("\nfind . | wc -l counts: binds %s, view %s (masks are still names in a bind; the view has no hidden names)\n", counts[0], counts[1])
	fmt.Printf("cpu includes refilling the row's pool, and for the view serving its lookups.\n")

	// The same table in Markdown, for docs/performance.md.
	fmt.Printf("\n| row (ms) | binds p50 | binds p95 | view p50 | view p95 | view/binds p50 | view/binds p95 | sluiced CPU/call, binds | view |\n")
	fmt.Printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range results {
		fmt.Printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f× | %.2f× | %.0f | %.0f |\n", mdEscape(r.label), ms(r.b50), ms(r.b95), ms(r.v50), ms(r.v95),
			float64(r.v50)/float64(r.b50), float64(r.v95)/float64(r.b95), ms(r.bcpu), ms(r.vcpu))
	}
}

var sideName = [2]string{"binds", "view"}

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
	for i := range treeDirs {
		dir := filepath.Join(tree, fmt.Sprintf("d%03d", i))
		check(os.Mkdir(dir, 0o755))
		for j := range treeFiles {
			check(os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.txt", j)), []byte(fmt.Sprintf("%d/%d\n", i, j)), 0o644))
		}
		if i%10 == 0 { // secrets the old build masks and the view hides
			check(os.WriteFile(filepath.Join(dir, ".env"), []byte("TOKEN=BENCH-SECRET\n"), 0o600))
			check(os.WriteFile(filepath.Join(dir, "id.pem"), []byte("BENCH-SECRET-KEY\n"), 0o600))
		}
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
