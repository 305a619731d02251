//go:build linux

package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"time"
	"unsafe"

	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// A tool's seccomp profile is compiled once, not in every container's
// init. libcontainer v1.5.3 has no way to take a compiled filter: its
// init builds the filter with libseccomp and loads it on every start
// (~1 ms of CPU, and the profile's 281 rules in the JSON config the init
// decodes). So the runner compiles it once per Spec with libcontainer's
// own code and takes the program the kernel holds back out of a
// throwaway process (exportSeccomp); each container then gets it on a
// pipe, and sluice-helper loads it (seccomp(2), with no_new_privs already
// set by libcontainer) before it reads the argv, so the same filter is in
// force before anything the tool runs: docs/sandbox.md.
//
// Whatever cannot be exported this way (a profile with flags or notify
// actions, a kernel without PTRACE_SECCOMP_GET_FILTER, a daemon under a
// seccomp filter of its own) falls back to libcontainer's compile in the
// init, as before.

// seccompExportArg is the argument the daemon binary is re-executed with
// to load a profile and wait to be read (see MaybeInit).
const seccompExportArg = "seccomp-export"

// seccompProgram returns spec's compiled seccomp program as the helper
// reads it (struct sock_filter, native endian) and the flags to load it
// with, or nil when libcontainer should compile it in the init.
func (r *Runner) seccompProgram(spec *Spec) ([]byte, uint) {
	if spec.Seccomp == nil || r.noSeccompExport {
		return nil, 0
	}
	spec.bpfOnce.Do(func() {
		flags, err := filterFlags(spec.Seccomp)
		if err == nil {
			spec.bpf, err = exportSeccomp(spec.Seccomp)
		}
		if err != nil {
			r.log.Info("seccomp profile compiled in each container's init", "reason", err)
			return
		}
		spec.bpfFlags = flags
	})
	return spec.bpf, spec.bpfFlags
}

// filterFlags are the seccomp(2) flags libcontainer loads sc's program
// with (patchbpf.filterFlags; specconv adds spec_allow to a profile that
// names no flags), or an error for what the helper does not load the way
// libcontainer does: notify actions (libcontainer hands those a listener
// fd) and flags other than log, spec_allow and tsync.
func filterFlags(sc *configs.Seccomp) (uint, error) {
	if api, _ := libseccomp.GetAPI(); api < 4 {
		return 0, fmt.Errorf("libseccomp API level %d", api)
	}
	var flags uint
	for _, f := range sc.Flags {
		switch f {
		case specs.LinuxSeccompFlagLog:
			flags |= unix.SECCOMP_FILTER_FLAG_LOG
		case specs.LinuxSeccompFlagSpecAllow:
			flags |= unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW
		case "SECCOMP_FILTER_FLAG_TSYNC":
			// one thread, the helper's
		default:
			return 0, fmt.Errorf("the profile has flag %s", f)
		}
	}
	if sc.DefaultAction == configs.Notify || sc.ListenerPath != "" {
		return 0, errors.New("the profile notifies")
	}
	for _, c := range sc.Syscalls {
		if c != nil && c.Action == configs.Notify {
			return 0, errors.New("the profile notifies")
		}
	}
	return flags, nil
}

// exportSeccomp compiles sc with libcontainer's InitSeccomp in a child
// (the daemon binary again, seccompExportChild) and reads the program the
// kernel installed back with PTRACE_SECCOMP_GET_FILTER: byte for byte what
// a container's init would load.
func exportSeccomp(sc *configs.Seccomp) ([]byte, error) {
	cfg, err := json.Marshal(sc)
	if err != nil {
		return nil, err
	}
	// ptrace requests must come from the tracing thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command("/proc/self/exe", seccompExportArg)
	cmd.Env = []string{}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	defer func() {
		cmd.Process.Kill()
		stdin.Close()
		cmd.Wait()
	}()
	if _, err := stdin.Write(cfg); err != nil {
		return nil, err
	}
	ready := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := io.ReadFull(stdout, b[:])
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			return nil, fmt.Errorf("seccomp export child: %w", err)
		}
	case <-time.After(10 * time.Second):
		return nil, errors.New("seccomp export child: no answer")
	}
	return filterOf(pid)
}

// filterOf reads the newest seccomp filter of process pid (a seized,
// interrupted tracee for the moment) and lets it go again.
func filterOf(pid int) ([]byte, error) {
	if err := unix.PtraceSeize(pid); err != nil {
		return nil, fmt.Errorf("ptrace seize: %w", err)
	}
	defer unix.PtraceDetach(pid)
	if err := unix.PtraceInterrupt(pid); err != nil {
		return nil, fmt.Errorf("ptrace interrupt: %w", err)
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("wait for ptrace stop: %w", err)
		}
		break
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

// seccompExportChild is the child of exportSeccomp: it loads the profile
// on stdin into itself, on the main thread (package inits run there, and
// init() locks it), says so on stdout and waits to be read and killed. It
// never returns.
func seccompExportChild() {
	var sc configs.Seccomp
	if err := json.NewDecoder(os.Stdin).Decode(&sc); err != nil {
		os.Exit(2)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		os.Exit(2)
	}
	if _, err := seccomp.InitSeccomp(&sc); err != nil {
		os.Exit(2)
	}
	os.Stdout.Write([]byte{1})
	io.Copy(io.Discard, os.Stdin) // until the parent is done
	os.Exit(0)
}
