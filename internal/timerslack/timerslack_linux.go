// Package timerslack sets a thread's timer slack: how much later than
// asked the kernel may fire its sleeps and timeouts, so that it can fire
// several at once (prctl PR_SET_TIMERSLACK, /proc/TID/timerslack_ns).
//
// sluiced raises its own (Daemon) for one reason: the Go runtime's sysmon
// thread sleeps 20 µs at a time while the daemon is busy, and with the
// kernel's default slack of 50 µs it wakes every ~70 µs. On a small VM
// each of those wakes lands on the vCPU that serves the call and
// preempts it: a read_file call was preempted by sysmon two or three
// times. With 500 µs sysmon wakes about five times less often; nothing
// in sluiced needs its timers to within half a millisecond (its
// timeouts are seconds; sysmon's own deadlines are 10 ms). The
// measurement is in docs/performance.md.
//
// A thread starts with the slack of the thread that created it, and a
// process keeps it across execve: a container's init sets its own back
// to Default (ResetThread) before it execs the helper, so that commands
// run with the kernel's default, not sluiced's.
package timerslack

import (
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

const (
	// Default is the kernel's timer slack for a new process (init's).
	Default = 50_000
	// Daemon is sluiced's own (see the package doc).
	Daemon = 500_000
)

// SetProcess gives every thread of this process the timer slack ns, and
// so every thread it makes later too: each is made by one of these. A
// thread made while it runs is found on its next pass over
// /proc/self/task. Setting another thread's slack takes CAP_SYS_NICE.
func SetProcess(ns uint64) error {
	val := []byte(strconv.FormatUint(ns, 10))
	done := map[string]bool{}
	for {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		found := false
		for _, e := range ents {
			tid := e.Name()
			if done[tid] {
				continue
			}
			found = true
			// /proc/TID/timerslack_ns: the file is not in task/TID/.
			err := os.WriteFile("/proc/"+tid+"/timerslack_ns", val, 0)
			if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ESRCH) {
				return err // a thread gone meanwhile is not an error
			}
			done[tid] = true
		}
		if !found {
			return nil
		}
	}
}

// ResetThread gives the calling thread the kernel's default slack. The
// caller must stay on its thread (runtime.LockOSThread) for it to mean
// anything.
func ResetThread() error {
	return unix.Prctl(unix.PR_SET_TIMERSLACK, Default, 0, 0, 0)
}
