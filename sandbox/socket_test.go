//go:build linux

package sandbox

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/profiles"
)

// refusedSockets are the probes (sandbox/testdata/probe.c) that open a
// socket the profile refuses. AF_VSOCK is not namespaced (it reaches the
// host or hypervisor), a NETLINK_KOBJECT_UEVENT socket receives the host's
// uevents, and the kernel reads domain and protocol as int, so a value
// with garbage in its upper 32 bits must not pass as its lower half.
var refusedSockets = []string{
	"vsock", "packet", "inet-packet", "alg", "uevent", "bluetooth",
	"vsock-highbits", "unix-highbits", "uevent-highbits", "route-highbits",
	"socketpair-vsock", "socketpair-packet", "socketpair-highbits",
}

// allowedSockets are the probes that must still open, with and without
// SOCK_CLOEXEC|SOCK_NONBLOCK in the type.
var allowedSockets = []string{
	"unix", "unix-flags", "socketpair-unix", "socketpair-unix-flags",
	"inet", "inet-flags", "inet6", "inet6-flags",
	"route", "route-flags", "route-dump",
}

// socketAllowed is the policy of profiles/default.json for the probe's
// sweeps (type SOCK_DGRAM, protocol 0): what sweep kind may open value v.
func socketAllowed(kind string, v uint64) bool {
	switch kind {
	case "socket", "socketpair":
		return v == unix.AF_UNIX || v == unix.AF_INET || v == unix.AF_INET6 || v == unix.AF_NETLINK
	case "netlink":
		return v == unix.NETLINK_ROUTE
	}
	return false
}

// TestSocketFamilies: socket(2) and socketpair(2) open only AF_UNIX,
// AF_INET, AF_INET6 and AF_NETLINK with NETLINK_ROUTE; everything else
// fails with EAFNOSUPPORT. The kernel returns EAFNOSUPPORT by itself for a
// family it lacks, so each refusal is checked again under a copy of the
// profile whose EAFNOSUPPORT rules return another errno: a result that
// does not follow is the kernel's, not the profile's.
func TestSocketFamilies(t *testing.T) {
	r := newRunner(t)
	f := newFixture(t)
	refused := func(t *testing.T, s *Spec, errno unix.Errno) {
		for _, name := range refusedSockets {
			out := probeOutput(t, r, s, f.probe, name)
			if want := fmt.Sprintf("blocked:%s:%d:", name, errno); strings.Contains(out, "ESCAPED") || !strings.Contains(out, want) {
				t.Errorf("%s: want %q, got %q", name, want, out)
			}
		}
		for _, kind := range []string{"socket", "socketpair", "netlink"} {
			checkSweep(t, kind, errno, probeOutput(t, r, s, f.probe, "sweep", kind))
		}
	}
	t.Run("refused", func(t *testing.T) { refused(t, f.spec(t), unix.EAFNOSUPPORT) })
	t.Run("refused by the profile", func(t *testing.T) {
		s := f.spec(t)
		s.Seccomp = profileWithErrno(t, uint(unix.EAFNOSUPPORT), uint(unix.EHWPOISON)) // socket(2) never returns EHWPOISON
		refused(t, s, unix.EHWPOISON)
	})
	t.Run("allowed", func(t *testing.T) {
		for _, name := range allowedSockets {
			if out := probeOutput(t, r, f.spec(t), f.probe, name); !strings.Contains(out, "ok:"+name+"\n") {
				t.Errorf("%s: want ok, got %q", name, out)
			}
		}
	})
	// Name lookup still works. With AI_ADDRCONFIG (getent ahosts) glibc
	// asks NETLINK_ROUTE for the addresses, but it quietly assumes both
	// IPv4 and IPv6 when it cannot open that socket; route-dump above is
	// what shows NETLINK_ROUTE works.
	t.Run("name lookup", func(t *testing.T) {
		s := f.spec(t)
		if out := probeOutput(t, r, s, "python3", "-c", `import socket; print({a[4][0] for a in socket.getaddrinfo("localhost", 80)})`); out != "{'127.0.0.1'}\n" {
			t.Errorf("python3 getaddrinfo(localhost): %q", out)
		}
		if out := probeOutput(t, r, s, "getent", "ahosts", "localhost"); !strings.Contains(out, "127.0.0.1       STREAM localhost\n") {
			t.Errorf("getent ahosts localhost: %q", out)
		}
	})
}

// probeOutput runs argv in a fresh container and returns what it printed.
func probeOutput(t *testing.T, r *Runner, s *Spec, argv ...string) string {
	t.Helper()
	res := run(t, r, s, argv...)
	return string(res.Stdout) + string(res.Stderr)
}

// checkSweep checks each line "<kind>:0x<value>:<ok|errno>" of the probe's
// sweep: a refused value fails with errno; an allowed one opens, except
// that socketpair(2) of a family other than AF_UNIX gets the kernel's
// EOPNOTSUPP.
func checkSweep(t *testing.T, kind string, errno unix.Errno, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 74 { // 64 small values and 10 with high bits
		t.Errorf("sweep %s: %d lines, want 74:\n%s", kind, len(lines), out)
	}
	for _, line := range lines {
		rest, ok := strings.CutPrefix(line, kind+":")
		hex, got, ok2 := strings.Cut(rest, ":")
		v, err := strconv.ParseUint(hex, 0, 64)
		if !ok || !ok2 || err != nil {
			t.Errorf("sweep %s: unexpected line %q", kind, line)
			continue
		}
		want := strconv.Itoa(int(errno))
		switch {
		case !socketAllowed(kind, v):
		case kind == "socketpair" && v != unix.AF_UNIX:
			want = strconv.Itoa(int(unix.EOPNOTSUPP))
		default:
			want = "ok"
		}
		if got != want {
			t.Errorf("%s(%#x): got %s, want %s", kind, v, got, want)
		}
	}
}

// profileWithErrno is profiles/default.json with every rule that returns
// errno from returning to instead.
func profileWithErrno(t *testing.T, from, to uint) *Profile {
	t.Helper()
	var prof specs.LinuxSeccomp
	if err := json.Unmarshal(profiles.DefaultSeccomp, &prof); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range prof.Syscalls {
		if e := prof.Syscalls[i].ErrnoRet; e != nil && *e == from {
			prof.Syscalls[i].ErrnoRet = &to
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no rule of the default profile returns errno %d", from)
	}
	b, err := json.Marshal(&prof)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ParseSeccomp(b)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}
