package sandbox

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
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

// TestPoolWaitWarmClosed: a pool closed before its first box is ready
// is not warm, and waiting for it ends at once.
func TestPoolWaitWarmClosed(t *testing.T) {
	p := NewPool(&Runner{}, &Spec{}, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	p.Close()
	if p.WaitWarm(context.Background()) {
		t.Fatal("a closed, never filled pool reported warm")
	}
}
