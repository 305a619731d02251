package timerslack

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testutil"
)

func slackOf(t *testing.T, tid string) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + tid + "/timerslack_ns")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSetProcess: every thread has the slack set, and so has a thread
// made afterwards and a process it starts. ResetThread puts the calling
// thread back to the kernel's default, and what it execs keeps that.
func TestSetProcess(t *testing.T) {
	testutil.RequireRoot(t) // another thread's slack takes CAP_SYS_NICE
	defer func() {
		if err := SetProcess(Default); err != nil {
			t.Fatal(err)
		}
	}()
	if err := SetProcess(Daemon); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if got := slackOf(t, e.Name()); got != Daemon {
			t.Errorf("thread %s: slack %d, want %d", e.Name(), got, Daemon)
		}
	}
	// A new thread, made while goroutines sit locked on the others.
	var wg sync.WaitGroup
	release := make(chan struct{})
	tids := make(chan int, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tids <- unix.Gettid()
			<-release
		}()
	}
	for range 8 {
		if got := slackOf(t, strconv.Itoa(<-tids)); got != Daemon {
			t.Errorf("a thread made later: slack %d, want %d", got, Daemon)
		}
	}
	close(release)
	wg.Wait()

	out, err := exec.Command("cat", "/proc/self/timerslack_ns").Output()
	if err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(Daemon) {
		t.Errorf("a child process: slack %q %v, want %d", out, err, Daemon)
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := ResetThread(); err != nil {
		t.Fatal(err)
	}
	if got := slackOf(t, strconv.Itoa(unix.Gettid())); got != Default {
		t.Errorf("after ResetThread: slack %d, want %d", got, Default)
	}
	// Forked from this thread, as a container's init execs its helper.
	out, err = exec.Command("cat", "/proc/self/timerslack_ns").Output()
	if err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(Default) {
		t.Errorf("a process started after ResetThread: slack %q %v, want %d", out, err, Default)
	}
}
