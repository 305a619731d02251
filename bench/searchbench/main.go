//go:build linux

// Command searchbench measures search (internal/walk, the engine behind
// the search tool) on a generated source tree against grep -r (and find,
// for names) on the same tree, one run each after one warm-up of every
// command, and prints the times side by side with their ratios.
//
//	searchbench [--dir DIR] [--files 10000] [--keep]
//
// The tree is made once per DIR (a stamp file remembers its shape):
// about --files source-like text files of 1–20 KiB in directories up to
// ten levels deep, a rare needle planted in a few dozen of them, and
// never-listed entries (.env files, a secrets/ directory, *.pem) holding
// the needle too. sluice's search runs in this process, as the daemon
// would run it, with the tool's never globs from a parsed manifest
// (authz.NeverMatchResolved) as its skip filter, so it does not report
// the hidden needles that grep does. Its caps are raised so that it
// walks the whole tree like grep; one row keeps the default 64 KiB cap.
// Nothing here asserts on time.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/walk"
)

const needle = "SLUICE_NEEDLE_7f3a"

func main() {
	dir := flag.String("dir", "", "where the tree is made (default: a temporary directory)")
	files := flag.Int("files", 10000, "files in the tree")
	keep := flag.Bool("keep", false, "keep a temporary tree")
	flag.Parse()
	if err := run(*dir, *files, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "searchbench:", err)
		os.Exit(1)
	}
}

func run(dir string, files int, keep bool) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "searchbench-")
		if err != nil {
			return err
		}
		dir = d
		if !keep {
			defer os.RemoveAll(d)
		}
	}
	tree := filepath.Join(dir, "tree")
	stamp := filepath.Join(dir, "stamp")
	shape := fmt.Sprintf("files=%d v1\n", files)
	if b, err := os.ReadFile(stamp); err != nil || string(b) != shape {
		os.RemoveAll(tree)
		t0 := time.Now()
		st, err := makeTree(tree, files)
		if err != nil {
			return err
		}
		fmt.Printf("made %s: %d files (%d MiB) in %d dirs, max depth %d, needle in %d shown and %d hidden files (%v)\n",
			tree, st.files, st.bytes>>20, st.dirs, st.maxDepth, st.needles, st.hiddenNeedles, time.Since(t0).Round(time.Millisecond))
		if err := os.WriteFile(stamp, []byte(shape), 0o644); err != nil {
			return err
		}
	}
	m, err := authz.Parse(strings.NewReader(`{"schema_version":1,"tools":{"search":{"operation":"list","roots":["tree"],"never":[".env","*.pem","secrets"]}}}`), dir)
	if err != nil {
		return err
	}
	tool := m.Tools["search"]
	skip := func(rel, name string, isDir bool) bool { return authz.NeverMatchResolved(tool, 0, rel) }
	big := walk.Options{Skip: skip, MaxBytes: 1 << 30, MaxResults: 1 << 30, RefuseHardLinks: true}

	type row struct {
		name  string
		q     walk.Query
		o     walk.Options
		other [][]string // baselines: argv
	}
	goGlob, _ := walk.Glob("*.go")
	rows := []row{
		{"names *.go", walk.Query{Name: goGlob}, big, [][]string{
			{"find", tree, "-name", "*.go"},
			{"grep", "-rl", "--include=*.go", "-e", "^", tree},
		}},
		{"content, rare needle", walk.Query{Content: regexp.MustCompile(needle)}, big, [][]string{
			{"grep", "-rn", "-e", needle, tree},
		}},
		{"content, common regex", walk.Query{Content: regexp.MustCompile(`func [a-z]+_[0-9]+\(`)}, big, [][]string{
			{"grep", "-rnE", "-e", `func [a-z]+_[0-9]+\(`, tree},
		}},
		{"content, common, 64 KiB cap", walk.Query{Content: regexp.MustCompile(`func [a-z]+_[0-9]+\(`)},
			walk.Options{Skip: skip, RefuseHardLinks: true}, nil},
	}
	fmt.Printf("GOMAXPROCS=%d, %s; one run each after a warm-up; sluice in-process (no socket), grep/find as processes;\n", runtime.GOMAXPROCS(0), runtime.Version())
	fmt.Printf("cpu is user+system time (this process's for sluice, the child's for the baseline): steadier than wall time on a shared machine\n\n")
	fmt.Printf("%-28s %10s %9s %8s | %-40s %10s %9s %7s | %6s %6s\n", "case", "sluice", "cpu", "results", "baseline", "time", "cpu", "lines", "wall×", "cpu×")
	for _, r := range rows {
		do := func() (time.Duration, time.Duration, *walk.Result, error) {
			c0, t0 := cpuSelf(), time.Now()
			res, err := search(tree, r.q, r.o)
			return time.Since(t0), cpuSelf() - c0, res, err
		}
		if _, _, _, err := do(); err != nil { // warm-up
			return err
		}
		d, cpu, res, err := do()
		if err != nil {
			return err
		}
		note := ""
		if res.Truncated {
			note = " (truncated: " + strings.Join(res.Limits, ",") + ")"
		}
		if len(r.other) == 0 {
			fmt.Printf("%-28s %10s %9s %8d | %s\n", r.name, ms(d), ms(cpu), res.Records, note)
		}
		for i, argv := range r.other {
			exec.Command(argv[0], argv[1:]...).Run() // warm-up
			cmd := exec.Command(argv[0], argv[1:]...)
			t0 := time.Now()
			out, err := cmd.Output()
			od := time.Since(t0)
			if err != nil && len(out) == 0 {
				return fmt.Errorf("%s: %v", strings.Join(argv, " "), err)
			}
			ocpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			label := r.name
			if i > 0 {
				label = ""
			}
			fmt.Printf("%-28s %10s %9s %8d | %-40s %10s %9s %7d | %5.2fx %5.2fx%s\n", label, ms(d), ms(cpu), res.Records,
				shortArgv(argv, tree), ms(od), ms(ocpu), bytes.Count(out, []byte{'\n'}), float64(d)/float64(od), float64(cpu)/float64(ocpu), note)
		}
	}
	return nil
}

// search is the daemon's path: a root held open, the start directory
// resolved beneath it (O_PATH), the walk from that fd.
func search(tree string, q walk.Query, o walk.Options) (*walk.Result, error) {
	root, err := securefs.OpenRoot(tree, securefs.ModeAuto)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	h, err := root.Resolve(".")
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return walk.Search(context.Background(), h.File(), q, o)
}

// cpuSelf is this process's user+system time so far (every thread).
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func shortArgv(argv []string, tree string) string {
	s := strings.ReplaceAll(strings.Join(argv, " "), tree, "TREE")
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return s
}

type treeStats struct {
	files, dirs, maxDepth, needles, hiddenNeedles int
	bytes                                         int64
}

// makeTree writes a deterministic source-like tree.
func makeTree(tree string, files int) (treeStats, error) {
	rng := rand.New(rand.NewPCG(25, 10000))
	var st treeStats
	type d struct {
		path  string
		depth int
	}
	dirs := []d{{tree, 0}}
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return st, err
	}
	words := []string{"pkg", "util", "net", "store", "index", "cache", "parse", "auth", "api", "core", "io", "view", "model", "http", "task"}
	for i := 0; len(dirs) < max(files/12, 2); i++ {
		// Prefer deeper parents so that chains reach ten levels.
		p := dirs[rng.IntN(len(dirs))]
		if q := dirs[len(dirs)-1-rng.IntN(min(len(dirs), 8))]; q.depth > p.depth && rng.IntN(2) == 0 {
			p = q
		}
		if p.depth >= 10 {
			continue
		}
		name := fmt.Sprintf("%s%d", words[rng.IntN(len(words))], i)
		c := d{filepath.Join(p.path, name), p.depth + 1}
		if err := os.Mkdir(c.path, 0o755); err != nil {
			return st, err
		}
		dirs = append(dirs, c)
		st.maxDepth = max(st.maxDepth, c.depth)
	}
	st.dirs = len(dirs)
	exts := []string{".go", ".go", ".go", ".py", ".ts", ".md", ".txt", ".c", ".h", ".json"}
	var buf bytes.Buffer
	for i := range files {
		dd := dirs[rng.IntN(len(dirs))]
		name := fmt.Sprintf("%s_%d%s", words[rng.IntN(len(words))], i, exts[rng.IntN(len(exts))])
		size := 1024 + rng.IntN(19*1024+1)
		buf.Reset()
		plant := rng.IntN(400) == 0
		for buf.Len() < size {
			switch rng.IntN(8) {
			case 0:
				fmt.Fprintf(&buf, "func %s_%d(ctx context.Context, n int) (string, error) {\n", words[rng.IntN(len(words))], rng.IntN(1000))
			case 1:
				fmt.Fprintf(&buf, "\t// %s the %s before %s: see docs/%s.md\n", words[rng.IntN(len(words))], words[rng.IntN(len(words))], words[rng.IntN(len(words))], words[rng.IntN(len(words))])
			case 2:
				fmt.Fprintf(&buf, "\tif err := %s.%s(n + %d); err != nil {\n\t\treturn \"\", fmt.Errorf(\"%s: %%w\", err)\n\t}\n", words[rng.IntN(len(words))], words[rng.IntN(len(words))], rng.IntN(100), words[rng.IntN(len(words))])
			case 3:
				buf.WriteString("}\n\n")
			default:
				fmt.Fprintf(&buf, "\tx%d := %s[%d] * %d // %s\n", rng.IntN(50), words[rng.IntN(len(words))], rng.IntN(64), rng.IntN(9999), words[rng.IntN(len(words))])
			}
			if plant && buf.Len() > size/2 {
				fmt.Fprintf(&buf, "\tconst marker = %q\n", needle)
				plant = false
				st.needles++
			}
		}
		if err := os.WriteFile(filepath.Join(dd.path, name), buf.Bytes(), 0o644); err != nil {
			return st, err
		}
		st.files++
		st.bytes += int64(buf.Len())
	}
	// Never-listed entries with the needle: grep finds them, search must not.
	for i, dd := range dirs {
		if i%40 != 0 {
			continue
		}
		for _, p := range []string{".env", "key.pem", "secrets/token.go"} {
			p = filepath.Join(dd.path, p)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return st, err
			}
			if err := os.WriteFile(p, []byte("TOKEN="+needle+"\n"), 0o600); err != nil {
				return st, err
			}
			st.hiddenNeedles++
		}
	}
	return st, nil
}
