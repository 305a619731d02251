//go:build linux

// Command unitsim approximates the seccomp rules that systemd installs
// for sluiced.service's hardening options (SystemCallFilter= deny list,
// ProtectKernelLogs=, RestrictAddressFamilies=, RestrictNamespaces= with
// clone3 as ENOSYS, RestrictRealtime=, RestrictSUIDSGID=,
// NoNewPrivileges=), then execs its arguments under them. Such filters
// are inherited by every container sluiced starts, so a suite that passes
// under them shows none takes away what libcontainer or a command needs.
// LockPersonality= is left out (libseccomp takes one check per argument)
// and libcontainer never calls personality(2) for our configs. Used by
// scripts/unitsim.sh; the real units are exercised in the VM.
package main

import (
	"fmt"
	"os"
	"runtime"
	"syscall"

	seccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "sdsim:", err)
		os.Exit(1)
	}
}

func main() {
	f, err := seccomp.NewFilter(seccomp.ActAllow)
	must(err)
	runtime.LockOSThread() // load and exec on one thread
	eperm := seccomp.ActErrno.SetReturnCode(int16(unix.EPERM))
	deny := func(names ...string) {
		for _, n := range names {
			sc, err := seccomp.GetSyscallFromName(n)
			if err != nil {
				continue // not on this arch
			}
			must(f.AddRule(sc, eperm))
		}
	}
	// SystemCallFilter=~@clock @cpu-emulation @debug @module @obsolete @raw-io @reboot @swap (systemd 252 sets)
	deny("adjtimex", "clock_adjtime", "clock_adjtime64", "clock_settime", "clock_settime64", "settimeofday",
		"modify_ldt", "subpage_prot", "switch_endian", "vm86", "vm86old",
		"lookup_dcookie", "perf_event_open", "pidfd_getfd", "ptrace", "rtas", "s390_runtime_instr", "sys_debug_setcontext",
		"delete_module", "finit_module", "init_module",
		"_sysctl", "afs_syscall", "bdflush", "break", "create_module", "ftime", "get_kernel_syms", "getpmsg", "gtty", "idle",
		"lock", "mpx", "prof", "profil", "putpmsg", "query_module", "security", "sgetmask", "ssetmask", "stime", "stty",
		"sysfs", "tuxcall", "ulimit", "uselib", "ustat", "vserver",
		"ioperm", "iopl", "pciconfig_iobase", "pciconfig_read", "pciconfig_write",
		"kexec_file_load", "kexec_load", "reboot", "swapoff", "swapon",
		// ProtectKernelLogs
		"syslog")
	// RestrictAddressFamilies=AF_UNIX AF_NETLINK AF_INET AF_INET6: every other family EAFNOSUPPORT
	eafn := seccomp.ActErrno.SetReturnCode(int16(unix.EAFNOSUPPORT))
	sock, _ := seccomp.GetSyscallFromName("socket")
	allowed := map[int]bool{unix.AF_UNIX: true, unix.AF_NETLINK: true, unix.AF_INET: true, unix.AF_INET6: true}
	for fam := 0; fam < unix.AF_MAX; fam++ {
		if !allowed[fam] {
			c, _ := seccomp.MakeCondition(0, seccomp.CompareEqual, uint64(fam))
			must(f.AddRuleConditional(sock, eafn, []seccomp.ScmpCondition{c}))
		}
	}
	// RestrictNamespaces=cgroup ipc mnt net pid uts: user and time refused; clone3 ENOSYS
	for _, name := range []string{"unshare", "clone"} {
		sc, _ := seccomp.GetSyscallFromName(name)
		for _, flag := range []uint64{unix.CLONE_NEWUSER, unix.CLONE_NEWTIME} {
			c, _ := seccomp.MakeCondition(0, seccomp.CompareMaskedEqual, flag, flag)
			must(f.AddRuleConditional(sc, eperm, []seccomp.ScmpCondition{c}))
		}
	}
	setns, _ := seccomp.GetSyscallFromName("setns")
	for _, v := range []uint64{0, unix.CLONE_NEWUSER, unix.CLONE_NEWTIME} {
		c, _ := seccomp.MakeCondition(1, seccomp.CompareEqual, v)
		must(f.AddRuleConditional(setns, eperm, []seccomp.ScmpCondition{c}))
	}
	c3, _ := seccomp.GetSyscallFromName("clone3")
	must(f.AddRule(c3, seccomp.ActErrno.SetReturnCode(int16(unix.ENOSYS))))
	// RestrictRealtime
	ss, _ := seccomp.GetSyscallFromName("sched_setscheduler")
	for _, pol := range []uint64{1, 2, 6} { // FIFO, RR, DEADLINE
		c, _ := seccomp.MakeCondition(1, seccomp.CompareEqual, pol)
		must(f.AddRuleConditional(ss, eperm, []seccomp.ScmpCondition{c}))
	}
	// (no RestrictSUIDSGID=: the unit leaves it out, as it fails openat2)
	must(unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) // NoNewPrivileges=yes
	must(f.Load())
	must(syscall.Exec(os.Args[1], os.Args[1:], os.Environ()))
}
