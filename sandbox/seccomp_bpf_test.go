//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testutil"
)

// filterOf reads the newest seccomp filter of process pid (a seized,
// interrupted tracee for the moment) and lets it go again. The caller
// locks its OS thread: ptrace requests come from the tracing thread.
func filterOf(pid int) ([]byte, error) {
	if err := unix.PtraceSeize(pid); err != nil {
		return nil, fmt.Errorf("ptrace seize: %w", err)
	}
	defer unix.PtraceDetach(pid)
	if err := unix.PtraceInterrupt(pid); err != nil {
		return nil, fmt.Errorf("ptrace interrupt: %w", err)
	}
	// The interrupt stop is reported (with a SIGCHLD to us) once the
	// tracee is back on its way to user space; one that never comes (a
	// tracee stuck in the kernel) fails the test with where it is,
	// instead of hanging the suite.
	var ws unix.WaitStatus
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, unix.SIGCHLD)
	defer signal.Stop(chld)
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		got, err := unix.Wait4(pid, &ws, unix.WALL|unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("wait for ptrace stop: %w", err)
		}
		if got == pid {
			break
		}
		select {
		case <-chld:
		case <-timeout.C:
			stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			wchan, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/wchan")
			stack, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stack")
			return nil, fmt.Errorf("process %d reported no ptrace stop in 30 s: stat %q, wchan %q, stack:\n%s", pid, stat, wchan, stack)
		}
	}
	if !ws.Stopped() {
		return nil, fmt.Errorf("process %d did not stop: %v", pid, ws)
	}
	n, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), 0, 0, 0, 0)
	if errno != 0 {
		return nil, fmt.Errorf("PTRACE_SECCOMP_GET_FILTER: %w", errno)
	}
	if n == 0 || n > 0xffff {
		return nil, fmt.Errorf("PTRACE_SECCOMP_GET_FILTER: %d instructions", n)
	}
	prog := make([]unix.SockFilter, n)
	m, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), 0, uintptr(unsafe.Pointer(&prog[0])), 0, 0)
	if errno != 0 || m != n {
		return nil, fmt.Errorf("PTRACE_SECCOMP_GET_FILTER: %d of %d instructions: %v", m, n, errno)
	}
	return encodeProgram(prog), nil
}

// encodeProgram lays prog out as the kernel's struct sock_filter array.
func encodeProgram(prog []unix.SockFilter) []byte {
	out := make([]byte, 0, 8*len(prog))
	for _, ins := range prog {
		out = binary.NativeEndian.AppendUint16(out, ins.Code)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.NativeEndian.AppendUint32(out, ins.K)
	}
	return out
}

// helperFilter reads the seccomp filters of b's first process (the helper,
// waiting for its argv): the newest, and whether there is an older one.
func helperFilter(t *testing.T, b *Box) []byte {
	t.Helper()
	st, err := b.c.State()
	if err != nil {
		t.Fatal(err)
	}
	pid := st.InitProcessPid
	// Wait for the helper itself, under its filter. Under libcontainer's
	// own filter the process is under seccomp while it is still the
	// container's init (multi-threaded Go, waiting on its exec fifo); one
	// seized then is gone at the exec if another thread makes it, and the
	// helper that takes its pid is not traced: the stop never came (a CI
	// failure, 2026-12-06). After the exec the process is the helper alone.
	if err := testutil.Poll(10*time.Second, func() error {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if strings.TrimSpace(string(comm)) != filepath.Base(helperInside) {
			return fmt.Errorf("process %d is %q, not the helper yet", pid, bytes.TrimSpace(comm))
		}
		s, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if !strings.Contains(string(s), "Seccomp:\t2") {
			return fmt.Errorf("helper %d not under seccomp yet", pid)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prog, err := filterOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// The filter compiled once and loaded by the helper is the one
// libcontainer compiles and loads in each init, instruction for
// instruction, and it is the only filter.
func TestSeccompPrecompiledSameAsInit(t *testing.T) {
	rInit := newRunner(t)
	rInit.noSeccompExport = true
	specInit := defaultSpec(t)
	bInit, err := rInit.Create(specInit)
	if err != nil {
		t.Fatal(err)
	}
	defer bInit.Destroy()
	want := helperFilter(t, bInit)

	r := newRunner(t)
	spec := defaultSpec(t)
	prog, flags := r.seccompProgram(spec)
	if prog == nil {
		t.Fatal("the default profile was not precompiled")
	}
	if flags != unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW {
		t.Errorf("flags %#x, want SECCOMP_FILTER_FLAG_SPEC_ALLOW as libcontainer sets", flags)
	}
	if !bytes.Equal(prog, want) {
		t.Fatalf("precompiled program (%d bytes) differs from the one libcontainer loads (%d bytes)", len(prog), len(want))
	}
	b, err := r.Create(spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := helperFilter(t, b); !bytes.Equal(got, want) {
		t.Fatalf("the helper's filter (%d bytes) differs from libcontainer's (%d bytes)", len(got), len(want))
	}
	// Exactly one filter, loaded with the same flags (spec_allow shows
	// in the speculation state).
	status := "grep -E '^(Seccomp|Seccomp_filters|NoNewPrivs|Speculation_Store_Bypass):' /proc/self/status"
	resInit, err := bInit.Exec(context.Background(), []string{"sh", "-c", status}, 4096, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Exec(context.Background(), []string{"sh", "-c", status + "; ls /proc/self/fd"}, 4096, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	if !strings.HasPrefix(out, string(resInit.Stdout)) {
		t.Errorf("status with the precompiled filter:\n%s\nwith libcontainer's:\n%s", out, resInit.Stdout)
	}
	for _, w := range []string{"Seccomp:\t2", "Seccomp_filters:\t1", "NoNewPrivs:\t1"} {
		if !strings.Contains(out, w) {
			t.Errorf("want %q in:\n%s", w, out)
		}
	}
	// Only stdio (and ls's own directory fd) are open: the program's
	// pipe is closed.
	if fds := strings.Fields(out[len(resInit.Stdout):]); len(fds) > 4 {
		t.Errorf("fds open in the command: %v", fds)
	}
}

// A program the kernel refuses never lets the helper run an argv.
func TestSeccompBadProgramFailsClosed(t *testing.T) {
	r := newRunner(t)
	spec := defaultSpec(t)
	spec.bpfOnce.Do(func() {})
	spec.bpf = []byte{0xff, 0xff, 0, 0, 0, 0, 0, 0} // one invalid instruction
	b, err := r.Create(spec)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Exec(context.Background(), []string{"sh", "-c", "echo ran"}, 4096, nil)
	if err == nil && (res.ExitCode != 126 || strings.Contains(string(res.Stdout), "ran")) {
		t.Fatalf("command ran without its filter: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// A helper that does not answer the protocol question (an older build,
// which ignores its arguments) never gets a filter to load: libcontainer
// compiles it in the init, so no command runs without it.
func TestOldHelperNoExport(t *testing.T) {
	if r := newRunner(t); r.noSeccompExport {
		t.Fatal("the built helper was not recognized")
	}
	testutil.RequireRoot(t)
	old := filepath.Join(t.TempDir(), "old-helper")
	if err := os.WriteFile(old, []byte("#!/bin/sh\nexec cat >/dev/null\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := NewRunnerWith(t.TempDir(), old, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Init: builtInit(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.noSeccompExport {
		t.Fatal("an old helper would be handed filters it does not load")
	}
	if prog, _ := r.seccompProgram(defaultSpec(t)); prog != nil {
		t.Fatal("a program for a helper that does not load it")
	}
}
