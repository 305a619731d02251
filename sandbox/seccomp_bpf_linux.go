//go:build linux

package sandbox

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/seccomp"
	"golang.org/x/sys/unix"
)

// A tool's seccomp profile is compiled once, not in every container's
// init. libcontainer v1.5.3 has no way to take a compiled filter: its
// init builds the filter with libseccomp and loads it on every start
// (~1 ms of CPU, and the profile's 281 rules in the JSON config the init
// decodes). So the runner compiles it once per Spec with libcontainer's
// own code (seccomp.InitSeccomp) in a throwaway child of the daemon, which
// catches the program, and the flags, on their way into the kernel
// (exportSeccomp); each container then gets it on a pipe, and
// sluice-helper loads it (seccomp(2), with no_new_privs already set by
// libcontainer) before it reads the argv, so the same filter is in force
// before anything the tool runs: docs/sandbox.md.
//
// Whatever cannot be exported this way (a profile with notify actions,
// an architecture other than amd64 and arm64, a kernel without seccomp
// user notification) falls back to libcontainer's compile in the init,
// as before.

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
		prog, flags, err := exportSeccomp(spec.Seccomp)
		if err != nil {
			r.log.Info("seccomp profile compiled in each container's init", "reason", err)
			return
		}
		spec.bpf, spec.bpfFlags = prog, flags
	})
	return spec.bpf, spec.bpfFlags
}

// helperProtocol is what a helper that loads filters from fd 3 prints
// when asked with --protocol (sandbox/helper/helper.c), followed, by one
// that stays PID 1 and reports the command's status on a pipe, by
// helperStatusWord.
const (
	helperProtocol   = "sluice-helper seccomp-fd"
	helperStatusWord = "status-fd"
)

// helperFeatures asks the helper binary what it does: load a filter
// handed to it (filters), and report the command's status (status). An
// older helper ignores the question, finds no argv on its empty stdin and
// fails: neither.
func helperFeatures(helper string) (filters, status bool) {
	cmd := exec.Command(helper, "--protocol")
	cmd.Env = []string{}
	out, err := cmd.Output() // stdin: /dev/null
	if err != nil {
		return false, false
	}
	rest, ok := strings.CutPrefix(string(bytes.TrimSpace(out)), helperProtocol)
	if !ok || (rest != "" && rest[0] != ' ') {
		return false, false
	}
	return true, slices.Contains(strings.Fields(rest), helperStatusWord)
}

// exportable refuses what the helper cannot load the way libcontainer
// does: notify actions (libcontainer hands those a listener fd).
func exportable(sc *configs.Seccomp) error {
	if sc.DefaultAction == configs.Notify || sc.ListenerPath != "" {
		return errors.New("the profile notifies")
	}
	for _, c := range sc.Syscalls {
		if c != nil && c.Action == configs.Notify {
			return errors.New("the profile notifies")
		}
	}
	if auditArch() == 0 {
		return fmt.Errorf("no seccomp export on %s", runtime.GOARCH)
	}
	return nil
}

func auditArch() uint32 {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64
	}
	return 0
}

// exportSeccomp compiles sc with libcontainer's InitSeccomp in a child
// (the daemon binary again, seccompExportChild), which reports the
// program and flags InitSeccomp hands the kernel: byte for byte what a
// container's init would load.
func exportSeccomp(sc *configs.Seccomp) ([]byte, uint, error) {
	if err := exportable(sc); err != nil {
		return nil, 0, err
	}
	cfg, err := json.Marshal(sc)
	if err != nil {
		return nil, 0, err
	}
	cmd := exec.Command("/proc/self/exe", seccompExportArg)
	cmd.Env = []string{}
	cmd.Stdin = bytes.NewReader(cfg)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		return nil, 0, errors.New("seccomp export child: no answer")
	}
	if err != nil {
		return nil, 0, fmt.Errorf("seccomp export child: %v: %s", err, bytes.TrimSpace(errb.Bytes()))
	}
	b := out.Bytes()
	if len(b) < 16 || (len(b)-8)%8 != 0 || len(b)-8 > 8*4096 {
		return nil, 0, fmt.Errorf("seccomp export child: %d bytes", len(b))
	}
	flags := binary.LittleEndian.Uint64(b)
	if flags&unix.SECCOMP_FILTER_FLAG_NEW_LISTENER != 0 {
		return nil, 0, errors.New("the profile notifies")
	}
	return b[8:], uint(flags), nil
}

// seccompExportChild is the child of exportSeccomp. It reads a profile
// on stdin and runs libcontainer's InitSeccomp on it, on the main thread
// (package inits run there, and init() locks it), under a filter of its
// own that turns the load (seccomp(SECCOMP_SET_MODE_FILTER) or
// prctl(PR_SET_SECCOMP)) into a user notification. Another thread takes
// the notification, copies the program and flags from this process's
// memory (/proc/self/mem: the caller waits in the syscall) and fails the
// load; every other seccomp call (libseccomp's feature probes) goes on
// as usual. It writes the flags (8 bytes, little endian) and the program
// to stdout and exits; it never returns.
func seccompExportChild() {
	fail := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", a...)
		os.Exit(2)
	}
	var sc configs.Seccomp
	if err := json.NewDecoder(os.Stdin).Decode(&sc); err != nil {
		fail("decode profile: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail("no_new_privs: %v", err)
	}
	listener, err := notifyOnSeccompLoad()
	if err != nil {
		fail("user notification filter: %v", err)
	}
	type caught struct {
		flags uint64
		prog  []byte
		err   error
	}
	got := make(chan caught, 1)
	go func() {
		flags, prog, err := catchSeccompLoad(listener)
		got <- caught{flags, prog, err}
	}()
	if _, err := seccomp.InitSeccomp(&sc); err == nil {
		fail("the filter was loaded, not caught")
	}
	c := <-got
	if c.err != nil {
		fail("%v", c.err)
	}
	out := binary.LittleEndian.AppendUint64(nil, c.flags)
	if _, err := os.Stdout.Write(append(out, c.prog...)); err != nil {
		os.Exit(2)
	}
	os.Exit(0)
}

// notifyOnSeccompLoad loads, on the calling thread, a filter that sends
// seccomp(2) and prctl(PR_SET_SECCOMP) to a user-notification listener,
// and returns the listener.
func notifyOnSeccompLoad() (int, error) {
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
		arg0 = 16 // offsetof(struct seccomp_data, args[0]), its low half on little endian
	)
	prog := []unix.SockFilter{
		{Code: ld, K: 4}, // arch
		{Code: jeq, Jt: 1, Jf: 0, K: auditArch()},
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},
		{Code: ld, K: 0}, // nr
		{Code: jeq, Jt: 3, Jf: 0, K: unix.SYS_SECCOMP},
		{Code: jeq, Jt: 0, Jf: 3, K: unix.SYS_PRCTL},
		{Code: ld, K: arg0},
		{Code: jeq, Jt: 0, Jf: 1, K: unix.PR_SET_SECCOMP},
		{Code: ret, K: unix.SECCOMP_RET_USER_NOTIF},
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	fd, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// seccompNotif and seccompNotifResp are the kernel's struct seccomp_notif
// and struct seccomp_notif_resp.
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// catchSeccompLoad answers notifications on listener until a filter load
// comes: it copies that program and its flags and fails the call with
// EPERM. Other calls go on (SECCOMP_USER_NOTIF_FLAG_CONTINUE).
func catchSeccompLoad(listener int) (flags uint64, prog []byte, err error) {
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		return 0, nil, err
	}
	defer mem.Close()
	for {
		var n seccompNotif
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n))); errno != 0 {
			if errno == unix.EINTR {
				continue
			}
			return 0, nil, fmt.Errorf("receive notification: %w", errno)
		}
		load := (n.Nr == unix.SYS_SECCOMP && n.Args[0] == unix.SECCOMP_SET_MODE_FILTER && n.Args[2] != 0) ||
			(n.Nr == unix.SYS_PRCTL && n.Args[0] == unix.PR_SET_SECCOMP && n.Args[1] == unix.SECCOMP_MODE_FILTER && n.Args[2] != 0)
		resp := seccompNotifResp{ID: n.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
		if load {
			if n.Nr == unix.SYS_SECCOMP {
				flags = n.Args[1]
			}
			prog, err = readFprog(mem, n.Args[2])
			resp = seccompNotifResp{ID: n.ID, Error: -int32(unix.EPERM)}
		}
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp))); errno != 0 && err == nil {
			err = fmt.Errorf("answer notification: %w", errno)
		}
		if load {
			return flags, prog, err
		}
	}
}

// readFprog reads the struct sock_fprog at addr in this process, and the
// instructions it points to.
func readFprog(mem *os.File, addr uint64) ([]byte, error) {
	var hdr [16]byte // unsigned short len; (padding); struct sock_filter *filter
	if _, err := mem.ReadAt(hdr[:], int64(addr)); err != nil {
		return nil, fmt.Errorf("read sock_fprog: %w", err)
	}
	n := int(binary.NativeEndian.Uint16(hdr[0:]))
	if n == 0 || n > 4096 {
		return nil, fmt.Errorf("sock_fprog of %d instructions", n)
	}
	prog := make([]byte, 8*n)
	if _, err := mem.ReadAt(prog, int64(binary.NativeEndian.Uint64(hdr[8:]))); err != nil {
		return nil, fmt.Errorf("read filter: %w", err)
	}
	return prog, nil
}
