package testutil

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Main runs the package's tests and then fails the run if fds or
// goroutines were left behind (the TestMain of cilium/ebpf's testmain).
func Main(m *testing.M) {
	fdsBefore := openFDs()
	goBefore := len(goroutines())
	code := m.Run()
	if code == 0 {
		if err := settle(func() error {
			if g := goroutines(); len(g) > goBefore {
				return fmt.Errorf("goroutines: %d before the tests, %d after:\n%s", goBefore, len(g), strings.Join(g, "\n\n"))
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

// settle retries check for a few seconds: closing connections and
// goroutines that are on their way out take a moment.
func settle(check func() error) error {
	var err error
	for range 50 {
		if err = check(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// goroutines returns the stacks of goroutines other than this one and
// those the runtime and the testing package keep for their own use.
func goroutines() []string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 || strings.TrimSpace(g) == "" {
			continue // the calling goroutine
		}
		if strings.Contains(g, "os/signal.signal_recv") || strings.Contains(g, "testing.(*F).Fuzz") ||
			strings.Contains(g, "testing.runFuzzing") || strings.Contains(g, "created by testing.(*M).startAlarm") {
			continue
		}
		out = append(out, g)
	}
	return out
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

// Helper returns the path of a built sluice-helper: $SLUICE_BIN_DIR's when
// it has one (make test builds it), else one compiled with gcc once per
// test binary.
func Helper(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("SLUICE_BIN_DIR"); d != "" {
		if p := filepath.Join(d, "sluice-helper"); fileExists(p) {
			return p
		}
	}
	return helper.build(t)
}

// Probe returns the path of the escape-probe program
// (sandbox/testdata/probe.c), compiled static once per test binary. It
// prints "ESCAPED:<name>" only when an escape attempt worked.
func Probe(t testing.TB) string {
	t.Helper()
	return probe.build(t)
}

var (
	helper = &cProgram{src: "sandbox/helper/helper.c", name: "sluice-helper", flags: []string{"-O2", "-s"}}
	probe  = &cProgram{src: "sandbox/testdata/probe.c", name: "probe", flags: []string{"-O1"}}
)

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
		_, self, _, _ := runtime.Caller(0)
		src := filepath.Join(filepath.Dir(self), "..", "..", c.src)
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
