//go:build linux

package transport

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func requirePeerPidfd(t *testing.T) {
	t.Helper()
	if err := PeerCgroupSupported(); err != nil {
		t.Skipf("KERNEL LACKS FEATURE: %v", err)
	}
}

// TestPeerCgroupOwn: on a socket pair the peer is this process, whose
// cgroup v2 path /proc/self/cgroup gives.
func TestPeerCgroupOwn(t *testing.T) {
	requirePeerPidfd(t)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	got, err := peerCgroup(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile("/proc/self/cgroup")
	want, err := unifiedPath(data)
	if err != nil || got != want {
		t.Fatalf("peerCgroup = %q; /proc/self/cgroup says %q (%v)", got, want, err)
	}
}

// TestPeerExitedChild is TestPeerCgroupExited's child: it connects and exits.
func TestPeerExitedChild(t *testing.T) {
	sock := os.Getenv("SLUICE_PEER_CHILD")
	if sock == "" {
		t.Skip("the child of TestPeerCgroupExited")
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("x"))
	// exits with the connection open in the listener's backlog
}

// TestPeerCgroupExited: a peer that connected and exited (and was reaped)
// before its connection was accepted has no cgroup: its pid may already
// be another process's, and the pidfd says it is gone.
func TestPeerCgroupExited(t *testing.T) {
	requirePeerPidfd(t)
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeerExitedChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SLUICE_PEER_CHILD="+sock)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, ok := peerCred(c)
	if !ok {
		t.Fatal("no SO_PEERCRED")
	}
	if p.Cgroup != "" {
		t.Fatalf("an exited peer's cgroup read as %q (pid %d)", p.Cgroup, p.PID)
	}
}

func TestUnifiedPath(t *testing.T) {
	for in, want := range map[string]string{
		"0::/system.slice/a.service\n":                    "/system.slice/a.service",
		"12:pids:/x\n1:name=systemd:/y\n0::/user.slice\n": "/user.slice",
		"0::/gone (deleted)\n":                            "/gone",
		"1:name=systemd:/y\n":                             "",
		"0::relative\n":                                   "",
	} {
		got, err := unifiedPath([]byte(in))
		if got != want || (err == nil) != (want != "") {
			t.Errorf("unifiedPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
