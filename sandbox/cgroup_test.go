//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestCgroupLayout drives the layout from fake /proc/self/cgroup texts:
// which service (if any) a process is in, and where its containers'
// cgroups and the sweep's directories then are.
func TestCgroupLayout(t *testing.T) {
	hybrid := "12:pids:/user.slice\n11:memory:/user.slice\n1:name=systemd:/user.slice/session-2.scope\n0::/user.slice/session-2.scope\n"
	cases := []struct {
		name, text string
		service    string   // want serviceOf
		path       string   // want cgroupPath("s1-7") with scope "abcd"
		dirs       []string // want scopeDirs under /cg with v1 hierarchies cpu, memory
	}{
		{name: "systemd service on v2", text: "0::/system.slice/sluiced.service\n",
			service: "/system.slice/sluiced.service",
			path:    "/system.slice/sluiced.service/containers/abcd/s1-7",
			dirs:    []string{"/cg/system.slice/sluiced.service/containers/abcd"}},
		{name: "already in its daemon leaf", text: "0::/system.slice/sluiced.service/daemon\n",
			service: "/system.slice/sluiced.service",
			path:    "/system.slice/sluiced.service/containers/abcd/s1-7",
			dirs:    []string{"/cg/system.slice/sluiced.service/containers/abcd"}},
		{name: "templated service in its own slice", text: "0::/sluice.slice/sluiced@a.service",
			service: "/sluice.slice/sluiced@a.service",
			path:    "/sluice.slice/sluiced@a.service/containers/abcd/s1-7",
			dirs:    []string{"/cg/sluice.slice/sluiced@a.service/containers/abcd"}},
		{name: "deep in another service's subtree", text: "0::/system.slice/ci-runner.service/job-42\n",
			path: "/sluice/abcd/s1-7", dirs: []string{"/cg/sluice/abcd", "/cg/cpu/sluice/abcd", "/cg/memory/sluice/abcd"}},
		{name: "login session on v2", text: "0::/user.slice/user-0.slice/session-3.scope\n",
			path: "/sluice/abcd/s1-7", dirs: []string{"/cg/sluice/abcd", "/cg/cpu/sluice/abcd", "/cg/memory/sluice/abcd"}},
		{name: "cgroup namespace root (a container)", text: "0::/\n",
			path: "/sluice/abcd/s1-7", dirs: []string{"/cg/sluice/abcd", "/cg/cpu/sluice/abcd", "/cg/memory/sluice/abcd"}},
		{name: "hybrid v1+v2 under a service", text: "4:memory:/system.slice/sluiced.service\n0::/system.slice/sluiced.service\n",
			path: "/sluice/abcd/s1-7", dirs: []string{"/cg/sluice/abcd", "/cg/cpu/sluice/abcd", "/cg/memory/sluice/abcd"}},
		{name: "hybrid session", text: hybrid,
			path: "/sluice/abcd/s1-7", dirs: []string{"/cg/sluice/abcd", "/cg/cpu/sluice/abcd", "/cg/memory/sluice/abcd"}},
		{name: "a path named like a service but not one", text: "0::/system.slice/x.service.d\n",
			path: "/sluice/abcd/s1-7", dirs: []string{"/cg/sluice/abcd", "/cg/cpu/sluice/abcd", "/cg/memory/sluice/abcd"}},
		{name: "empty", text: "",
			path: "/sluice/abcd/s1-7", dirs: []string{"/cg/sluice/abcd", "/cg/cpu/sluice/abcd", "/cg/memory/sluice/abcd"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := CgroupLayout{Service: serviceOf([]byte(c.text))}
			if l.Service != c.service {
				t.Fatalf("serviceOf = %q, want %q", l.Service, c.service)
			}
			r := &Runner{scope: "abcd", cgroups: l}
			if got := r.cgroupPath("s1-7"); got != c.path {
				t.Errorf("cgroupPath = %q, want %q", got, c.path)
			}
			asked := false
			got := scopeDirs("/cg", l, "abcd", func() []string { asked = true; return []string{"cpu", "memory"} })
			if !slices.Equal(got, c.dirs) {
				t.Errorf("scopeDirs = %q, want %q", got, c.dirs)
			}
			if asked && l.Delegated() {
				t.Error("a delegated layout looked at v1 hierarchies")
			}
		})
	}
}

// TestLayoutOfLeaf: Leftovers' view of where containers are, from the
// caller's /proc/self/cgroup: delegated only from a daemon leaf. A test in
// a service's own cgroup (an ssh session in ssh.service, in the VM) starts
// daemons that fall back to the layout outside systemd.
func TestLayoutOfLeaf(t *testing.T) {
	for text, want := range map[string]string{
		"0::/system.slice/sluiced.service/daemon\n":   "/system.slice/sluiced.service",
		"0::/system.slice/ssh.service\n":              "",
		"0::/system.slice/sluiced.service\n":          "",
		"0::/user.slice/user-0.slice/session-3.scope": "",
		"0::/daemon\n": "",
		"":             "",
	} {
		if got := layoutOfLeaf([]byte(text)).Service; got != want {
			t.Errorf("layoutOfLeaf(%q) = %q, want %q", text, got, want)
		}
	}
}

// TestPoolWaitWarmClosed: a pool closed before its first box is ready
// is not warm, and waiting for it ends at once.
func TestPoolWaitWarmClosed(t *testing.T) {
	p := NewPool(&Runner{}, &Spec{}, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	p.Close()
	if p.WaitWarm(context.Background()) {
		t.Fatal("a closed, never filled pool reported warm")
	}
}

// cgroup2Mount finds a cgroup v2 hierarchy: /sys/fs/cgroup on a pure v2
// host, /sys/fs/cgroup/unified on a hybrid one.
func cgroup2Mount() string {
	for _, d := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if isCgroup2(d) {
			return d
		}
	}
	return ""
}

// TestSetupCgroupsMoves runs the move on a real cgroup v2 hierarchy: this
// test process is put in a fake service's cgroup, SetupCgroups' logic
// moves it into SERVICE/daemon; and with another process left in the
// service's cgroup it moves back and keeps the layout outside systemd.
// The process goes back where it was, and the cgroups are removed.
func TestSetupCgroupsMoves(t *testing.T) {
	testutil.RequireRoot(t)
	root := cgroup2Mount()
	if root == "" {
		t.Skip("no cgroup v2 hierarchy mounted")
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var orig string
	for _, line := range strings.Split(string(self), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			orig = p
		}
	}
	if orig == "" {
		t.Fatal("no 0:: line in /proc/self/cgroup")
	}
	slice := fmt.Sprintf("/sluice-test-%d.slice", os.Getpid())
	svc := slice + "/fake.service"
	pid := []byte(strconv.Itoa(os.Getpid()))
	moveTo := func(cg string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, cg, "cgroup.procs"), pid, 0); err != nil {
			t.Fatalf("move to %s: %v", cg, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, svc), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(root, orig, "cgroup.procs"), pid, 0)
		os.Remove(filepath.Join(root, svc, daemonLeaf))
		os.Remove(filepath.Join(root, svc))
		os.Remove(filepath.Join(root, slice))
	})
	inCgroup := func() string {
		b, _ := os.ReadFile("/proc/self/cgroup")
		for _, line := range strings.Split(string(b), "\n") {
			if p, ok := strings.CutPrefix(line, "0::"); ok {
				return p
			}
		}
		return ""
	}

	moveTo(svc)
	l, warning, err := setupCgroupsAt(root, []byte("0::"+svc+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Service != svc || inCgroup() != svc+"/"+daemonLeaf {
		t.Fatalf("layout %+v, process in %s; want service %s, process in its daemon leaf", l, inCgroup(), svc)
	}
	if !strings.Contains(warning, "Delegate=yes") {
		t.Errorf("no warning about a cgroup systemd did not delegate: %q", warning)
	}
	// Again from the leaf (a second Runner of the same process): same layout.
	if l2, _, err := setupCgroupsAt(root, []byte("0::"+svc+"/"+daemonLeaf+"\n")); err != nil || l2 != l {
		t.Fatalf("second setup: %+v %v", l2, err)
	}

	// Another process in the service's own cgroup: move back, no delegation.
	moveTo(svc)
	testutil.Must(t, os.Remove(filepath.Join(root, svc, daemonLeaf)))
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	// The child was forked in svc: it is there until it is moved.
	l, warning, err = setupCgroupsAt(root, []byte("0::"+svc+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Delegated() || inCgroup() != svc || !strings.Contains(warning, "other processes") {
		t.Fatalf("with another process there: layout %+v, in %s, warning %q", l, inCgroup(), warning)
	}
	other.Process.Kill()
	other.Wait()
	moveTo(orig)
}
