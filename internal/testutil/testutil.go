package testutil

import (
	"fmt"
	"os"
	"runtime"
	"strings"
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
		if t == "anon_inode:[eventpoll]" || t == "anon_inode:[eventfd]" {
			continue // the Go runtime's netpoller, made on first use
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
