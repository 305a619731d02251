package testutil

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Main runs the package's tests and then fails the run if fds or
// goroutines were left behind (the TestMain of cilium/ebpf's testmain).
// Goroutines are compared by identity, not by count: any goroutine alive
// after the tests that was not alive before them (and is not one the
// runtime or the testing package keeps) is a leak, reported with its
// stack, even if as many others exited meanwhile.
func Main(m *testing.M) { MainWith(m, nil) }

// MainWith is Main with after run once the tests have run, passed or not,
// before the leak check (a teardown); an error from it fails the run.
func MainWith(m *testing.M, after func() error) {
	spliceBaseline()
	fdsBefore := openFDs()
	goBefore := Goroutines()
	code := m.Run()
	if after != nil {
		if err := after(); err != nil {
			fmt.Fprintf(os.Stderr, "after the tests: %v\n", err)
			code = 1
		}
	}
	if code == 0 {
		if err := settle(func() error {
			spliceRelease()
			if leaked := LeakedGoroutines(goBefore); len(leaked) > 0 {
				return fmt.Errorf("%d goroutines leaked:\n\n%s", len(leaked), formatGoroutines(leaked))
			}
			after := openFDs()
			var leaked []string
			for fd, target := range after {
				if _, ok := fdsBefore[fd]; !ok {
					leaked = append(leaked, fd+" -> "+target)
				}
			}
			if len(leaked) > 0 {
				return fmt.Errorf("fds leaked: %s", strings.Join(leaked, ", "))
			}
			return nil
		}); err != nil {
			fmt.Fprintf(os.Stderr, "LEAK CHECK FAILED: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// settle polls check for up to 5 s: closing connections and goroutines
// that are on their way out take a moment.
func settle(check func() error) error { return Poll(5*time.Second, check) }

// Poll calls check every 50 ms until it returns nil or timeout has passed,
// and returns its last error: for conditions with no event to wait on (a
// policy version, the kernel's view of cgroups and mounts).
func Poll(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond) // polling, up to the deadline
	}
}

// Goroutine is one goroutine of a runtime.Stack(all) dump.
type Goroutine struct {
	ID    uint64 // unique for the life of the process: never reused
	State string // "chan receive", "select, 2 minutes", ...
	// Top is the innermost function that is not the runtime's own
	// parking (gopark, selectgo, ...): what the goroutine is waiting in.
	Top string
	// CreatedBy is the function that started it ("" for main).
	CreatedBy string
	Stack     string // the whole dump of it, header included
}

// Goroutines returns the goroutines alive now, but the caller's and those
// the runtime and the testing package keep for their own use.
func Goroutines() map[uint64]Goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[uint64]Goroutine{}
	for i, g := range parseGoroutines(string(buf)) {
		if i == 0 || ignored(g) {
			continue // the first is the calling goroutine
		}
		out[g.ID] = g
	}
	return out
}

// LeakedGoroutines returns the goroutines alive now that were not in
// before, sorted by id.
func LeakedGoroutines(before map[uint64]Goroutine) []Goroutine {
	var out []Goroutine
	for id, g := range Goroutines() {
		if _, ok := before[id]; !ok {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func formatGoroutines(gs []Goroutine) string {
	var b strings.Builder
	for _, g := range gs {
		fmt.Fprintf(&b, "goroutine %d in %s (created by %s):\n%s\n\n", g.ID, g.Top, g.CreatedBy, g.Stack)
	}
	return strings.TrimRight(b.String(), "\n")
}

// parseGoroutines splits a runtime.Stack(all) dump into its goroutines,
// in the dump's order. Each block is a header line
// ("goroutine 7 [sleep]:", with " gp=... m=..." before the state when
// GOTRACEBACK asks for it), then pairs of a function line and a
// "\tfile:line" line, then "created by F in goroutine N" and its line.
func parseGoroutines(dump string) []Goroutine {
	var out []Goroutine
	for _, block := range strings.Split(dump, "\n\n") {
		block = strings.TrimSpace(block)
		lines := strings.Split(block, "\n")
		head, ok := strings.CutPrefix(lines[0], "goroutine ")
		if !ok {
			continue
		}
		idStr, rest, _ := strings.Cut(head, " ")
		id, err := strconv.ParseUint(idStr, 10, 64)
		if err != nil {
			continue
		}
		g := Goroutine{ID: id, Stack: block}
		if i, j := strings.IndexByte(rest, '['), strings.LastIndexByte(rest, ']'); i >= 0 && j > i {
			g.State = rest[i+1 : j]
		}
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "\t") || l == "" {
				continue // a file:line
			}
			if c, ok := strings.CutPrefix(l, "created by "); ok {
				g.CreatedBy, _, _ = strings.Cut(c, " in goroutine ")
				break
			}
			fn := funcName(l)
			if g.Top == "" && !parking(fn) {
				g.Top = fn
			}
		}
		out = append(out, g)
	}
	return out
}

// funcName cuts the arguments off a stack line: "main.f(0x1, ...)" is
// "main.f"; "net/http.(*conn).serve(...)" is "net/http.(*conn).serve".
func funcName(line string) string {
	if i := strings.LastIndex(line, "("); i > 0 && strings.HasSuffix(line, ")") {
		return line[:i]
	}
	return line
}

// parking is a runtime function a blocked goroutine sits in whatever it
// waits for; the frame above it says more.
func parking(fn string) bool {
	for _, p := range []string{"runtime.", "internal/poll.runtime_", "sync.runtime_", "internal/sync.runtime_"} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// ignored: goroutines the runtime and the testing package start once and
// keep, wherever a test first caused them (signal.Notify's loop, the
// fuzzing engine, the -timeout alarm).
func ignored(g Goroutine) bool {
	for _, fn := range []string{"os/signal.signal_recv", "os/signal.loop", "testing.(*F).Fuzz", "testing.runFuzzing",
		"testing.(*M).startAlarm", "testing.(*M).startAlarm.func1"} {
		if g.Top == fn || g.CreatedBy == fn || strings.Contains(g.Stack, "\n"+fn+"(") {
			return true
		}
	}
	return false
}

func openFDs() map[string]string {
	out := map[string]string{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return out
	}
	for _, e := range ents {
		t, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the fd ReadDir itself used
		}
		switch t {
		case "anon_inode:[eventpoll]", "anon_inode:[eventfd]":
			continue // the Go runtime's netpoller, made on first use
		case "/sys/fs/cgroup", "/":
			// The cgroup and procfs packages under libcontainer cache one
			// handle each for the life of the process. A per-container
			// leak is caught by sandbox's TestNoFDGrowth instead.
			continue
		}
		out[e.Name()] = t
	}
	return out
}

// RequireRoot fails (never skips) a test that needs root: CI runs as root,
// so a non-root run is a misconfiguration to be told about.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root (CI runs as root); run 'make test' as root")
	}
}

// Helper returns the path of a built sluice-helper with sluice-init
// beside it (where sandbox looks for the container's init by default):
// $SLUICE_BIN_DIR's when it has both (make test builds them), else both
// built once per test binary, the helper with gcc and sluice-init with
// go build, in a root-owned directory of /tmp.
func Helper(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("SLUICE_BIN_DIR"); d != "" {
		p := filepath.Join(d, "sluice-helper")
		if fileExists(p) && fileExists(filepath.Join(d, "sluice-init")) {
			return p
		}
	}
	p := helper.build(t)
	buildInit.Do(func() {
		root, err := repoRoot()
		if err != nil {
			initErr = err
			return
		}
		cmd := exec.Command("go", "build", "-tags", "seccomp", "-o", filepath.Join(filepath.Dir(p), "sluice-init"), "./cmd/sluice-init")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			initErr = fmt.Errorf("go build sluice-init: %v: %s", err, out)
		}
	})
	if initErr != nil {
		t.Fatal(initErr)
	}
	return p
}

var (
	buildInit sync.Once
	initErr   error
)

// Probe returns the path of the escape-probe program
// (sandbox/testdata/probe.c), compiled static once per test binary. It
// prints "ESCAPED:<name>" only when an escape attempt worked.
func Probe(t testing.TB) string {
	t.Helper()
	return probe.build(t)
}

var (
	helper = &cProgram{src: "sandbox/helper/helper.c", name: "sluice-helper", flags: []string{"-O2", "-s"}}
	// lingerHelper is the helper built to stay 2 s after its report
	// (LingeringHelper).
	lingerHelper = &cProgram{src: "sandbox/helper/helper.c", name: "sluice-helper", flags: []string{"-O2", "-s", "-DSLUICE_HELPER_LINGER_MS=2000"}}
	probe        = &cProgram{src: "sandbox/testdata/probe.c", name: "probe", flags: []string{"-O1"}}
)

// LingeringHelper is a sluice-helper that stays 2 s after reporting how
// its command ended, beside a link to Helper's sluice-init: what a call
// does before its box's PID 1 exits can be seen.
func LingeringHelper(t testing.TB) string {
	t.Helper()
	init := filepath.Join(filepath.Dir(Helper(t)), "sluice-init")
	p := lingerHelper.build(t)
	link := filepath.Join(filepath.Dir(p), "sluice-init")
	if _, err := os.Lstat(link); err != nil {
		if err := os.Symlink(init, link); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// cProgram is a C source of the repository built static with gcc, once.
type cProgram struct {
	src, name string
	flags     []string
	once      sync.Once
	path      string
	err       error
}

func (c *cProgram) build(t testing.TB) string {
	t.Helper()
	c.once.Do(func() {
		root, err := repoRoot()
		if err != nil {
			c.err = err
			return
		}
		src := filepath.Join(root, c.src)
		dir, err := os.MkdirTemp("", "sluice-"+c.name)
		if err != nil {
			c.err = err
			return
		}
		c.path = filepath.Join(dir, c.name)
		args := append(append([]string{"-static"}, c.flags...), "-o", c.path, src)
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			c.err = fmt.Errorf("gcc %s: %v: %s", c.name, err, out)
		}
	})
	if c.err != nil {
		t.Fatal(c.err)
	}
	return c.path
}

// repoRoot is the module's root: the nearest directory above the test's
// working directory (its package's directory) that holds go.mod. Not
// runtime.Caller's file name, which -trimpath makes relative.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if fileExists(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = up
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Listener listens on 127.0.0.1 and counts the connections it accepts:
// egress tests assert that a sandbox never reaches it.
func Listener(t testing.TB) (port string, accepted func() int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), n.Load
}
