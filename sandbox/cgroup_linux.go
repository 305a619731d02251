package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroupRoot is where the cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// CgroupLayout says where a Runner puts its containers' cgroups. It is
// computed once when the daemon starts (see SetupCgroups) and handed to
// every Runner through Options; the zero value is the layout outside
// systemd: /sluice/<scope>/<id> in every hierarchy (cgroup v1 or hybrid)
// or in the unified one (plain v2).
type CgroupLayout struct {
	// Service is the cgroup v2 path of the systemd service the daemon runs
	// in with Delegate=yes ("/system.slice/sluiced.service"), or "" when
	// it does not. Under it the daemon lives in the leaf Service/daemon and
	// its containers in Service/containers/<scope>/<id>: cgroup v2 lets
	// only leaves hold processes once controllers are enabled below a
	// cgroup (the no-internal-processes rule), so the daemon cannot stay
	// in Service itself. systemd kills the whole subtree when the service
	// stops, so no container outlives the daemon.
	Service string
}

// Delegated reports whether containers go into a systemd-delegated subtree.
func (l CgroupLayout) Delegated() bool { return l.Service != "" }

// parent is the cgroup path that holds every scope's containers.
func (l CgroupLayout) parent() string {
	if l.Delegated() {
		return l.Service + "/containers"
	}
	return "/" + cgroupParent
}

// String names the layout for logs.
func (l CgroupLayout) String() string {
	if l.Delegated() {
		return "systemd-delegated " + l.parent()
	}
	return l.parent()
}

// daemonLeaf is the leaf the daemon moves itself into under a service.
const daemonLeaf = "daemon"

// serviceOf returns the service cgroup a process is in, from the text of
// its /proc/self/cgroup, when that is a single cgroup v2 line ("0::PATH")
// whose PATH is a *.service or that service's daemon leaf; else "". A
// process deeper in some other service's subtree (a runtime that
// delegated it a cgroup of its own) is not that service's main process:
// it gets "" and today's layout.
func serviceOf(procSelfCgroup []byte) string {
	lines := strings.Split(strings.TrimSpace(string(procSelfCgroup)), "\n")
	if len(lines) != 1 {
		return "" // v1 or hybrid: one line per hierarchy
	}
	p, ok := strings.CutPrefix(lines[0], "0::")
	if !ok || !strings.HasPrefix(p, "/") {
		return ""
	}
	p = path.Clean(p)
	if path.Base(p) == daemonLeaf {
		p = path.Dir(p) // moved there already (an earlier Runner of this process)
	}
	if p == "/" || !strings.HasSuffix(path.Base(p), ".service") {
		return ""
	}
	return p
}

// isCgroup2 reports whether dir is a cgroup v2 mount.
func isCgroup2(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// currentLayout is the layout the calling process is in now, without
// moving it: the delegated one only when it is in a service's daemon leaf
// (a sluiced, or a test, that SetupCgroups moved there). A process in a
// service's own cgroup has not been moved (an ssh session's shell in
// ssh.service on a host without logind, say): the daemons it starts find
// it beside them and fall back to the layout outside systemd, so that is
// where their containers are.
func currentLayout() CgroupLayout {
	if !isCgroup2(cgroupRoot) {
		return CgroupLayout{}
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return CgroupLayout{}
	}
	return layoutOfLeaf(b)
}

// layoutOfLeaf is currentLayout for a /proc/self/cgroup text.
func layoutOfLeaf(procSelfCgroup []byte) CgroupLayout {
	p, _ := strings.CutPrefix(strings.TrimSpace(string(procSelfCgroup)), "0::")
	if path.Base(path.Clean(p)) != daemonLeaf {
		return CgroupLayout{}
	}
	return CgroupLayout{Service: serviceOf(procSelfCgroup)}
}

// SetupCgroups computes the layout once at start. Running as a systemd
// service on a pure cgroup v2 host, it moves this process into the leaf
// SERVICE/daemon so that containers can be made beside it, under
// SERVICE/containers. If another process stays in the service's own cgroup
// (sluiced was started as a child of some service rather than as one), the
// move is undone and the layout outside systemd is used: libcontainer
// could not enable controllers there. The warning, if not empty, says why
// a service did not get the delegated layout or lacks Delegate=yes.
func SetupCgroups() (layout CgroupLayout, warning string, err error) {
	if !isCgroup2(cgroupRoot) {
		return CgroupLayout{}, "", nil
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return CgroupLayout{}, "", nil
	}
	return setupCgroupsAt(cgroupRoot, self)
}

// setupCgroupsAt is SetupCgroups on the cgroup v2 hierarchy mounted at
// root, for a process whose /proc/self/cgroup reads self.
func setupCgroupsAt(root string, self []byte) (layout CgroupLayout, warning string, err error) {
	l := CgroupLayout{Service: serviceOf(self)}
	if !l.Delegated() {
		return CgroupLayout{}, "", nil
	}
	svc := filepath.Join(root, l.Service)
	if !delegated(svc) {
		warning = "the service's cgroup is not marked delegated (its unit should have Delegate=yes); systemd may change its subtree under sluiced"
	}
	leaf := filepath.Join(svc, daemonLeaf)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return CgroupLayout{}, "", fmt.Errorf("cgroup: make daemon leaf: %w", err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), pid, 0); err != nil {
		return CgroupLayout{}, "", fmt.Errorf("cgroup: move sluiced into %s: %w", leaf, err)
	}
	if procs, _ := os.ReadFile(filepath.Join(svc, "cgroup.procs")); len(bytes.TrimSpace(procs)) > 0 {
		if err := os.WriteFile(filepath.Join(svc, "cgroup.procs"), pid, 0); err != nil {
			return CgroupLayout{}, "", fmt.Errorf("cgroup: move sluiced back into %s: %w", svc, err)
		}
		os.Remove(leaf)
		return CgroupLayout{}, "other processes are in the service's cgroup " + l.Service +
			", so containers cannot be made beside sluiced there; using " + CgroupLayout{}.parent(), nil
	}
	return l, warning, nil
}

// delegated reports whether systemd marked the cgroup dir delegated to its
// service (systemd ≥ 251 sets trusted.delegate, or user.delegate, to "1").
func delegated(dir string) bool {
	buf := make([]byte, 8)
	for _, attr := range []string{"trusted.delegate", "user.delegate"} {
		if n, err := unix.Getxattr(dir, attr, buf); err == nil && string(buf[:n]) == "1" {
			return true
		}
	}
	return false
}

// cgroupPath is the container's cgroup, from the hierarchy's root.
func (r *Runner) cgroupPath(id string) string {
	return r.cgroups.parent() + "/" + r.scope + "/" + id
}

// cgroupDirs returns the directories that hold this run dir's container
// cgroups and exist: PARENT/<scope> in every mounted v1 hierarchy and in
// the unified one (outside systemd), or just the unified one's (under a
// delegating service).
func (r *Runner) cgroupDirs() []string {
	return existingDirs(scopeDirs(cgroupRoot, r.cgroups, r.scope, func() []string {
		ents, _ := os.ReadDir(cgroupRoot)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}))
}

// scopeDirs lists the candidate scope directories under root; hierarchies
// lists the mounted v1 hierarchies' names (only asked for outside systemd).
func scopeDirs(root string, l CgroupLayout, scope string, hierarchies func() []string) []string {
	cands := []string{filepath.Join(root, l.parent(), scope)}
	if !l.Delegated() {
		for _, h := range hierarchies() {
			cands = append(cands, filepath.Join(root, h, l.parent(), scope))
		}
	}
	return cands
}

func existingDirs(cands []string) []string {
	var out []string
	for _, c := range cands {
		if fi, err := os.Stat(c); err == nil && fi.IsDir() {
			out = append(out, c)
		}
	}
	return out
}
