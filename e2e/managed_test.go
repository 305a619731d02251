//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
)

// The suite against a managed daemon. With SLUICE_E2E_SOCKET set, tests
// that only need *a* sluiced (startDaemon) drive the one already running
// there — in the VM, the systemd-managed, socket-activated service —
// instead of starting their own. Each such test writes its manifest (its
// fixture's, with "base" set to the fixture's directory) over the file
// that daemon loads, reloads it, and waits for the new policy version;
// when the test ends, an idle manifest (no execute tools) is loaded and
// the test waits until none of the test's containers, cgroups, mounts or
// rootfs dirs is left. After the suite the daemon's original manifest is
// put back. Tests that must own the process (signals, SIGKILL, restarts)
// still start their own sluiced (startOwnDaemon), beside the managed one.
//
//	SLUICE_E2E_SOCKET     the daemon's socket (e.g. /run/sluice/sluice.sock)
//	SLUICE_E2E_MANIFEST   the manifest file it loads (default /etc/sluice/manifest.json)
//	SLUICE_E2E_RELOAD     a shell command that makes it reload (default: systemctl reload sluiced.service)
//	SLUICE_E2E_STATE_DIR  its state dir, with audit.jsonl (default /var/lib/sluice)
//	SLUICE_E2E_RUN_DIR    its sandbox run dir (default /run/sluice/sandbox)
//	SLUICE_E2E_LOG        a shell command printing its log (default: journalctl -u sluiced.service -o cat)
//	SLUICE_E2E_CGROUP     its service's cgroup (default: systemctl show -P ControlGroup sluiced.service)
//	TMPDIR                required: where fixtures are made; the daemon must see it
//	                      (the service has PrivateTmp=yes: not /tmp), e.g. /srv/sluice/e2e
type managedDaemon struct {
	socket, manifest, reload, stateDir, runDir, logCmd string
	layouts                                            []sandbox.CgroupLayout
	orig                                               []byte // the manifest before the suite
	idle                                               []byte // the manifest between tests
	idleDir                                            string
	c                                                  *client.Client
}

var managed *managedDaemon

// reloadTimeout bounds a reload and the teardown of a test's containers:
// generous, as the VM runs under emulation (TCG).
const reloadTimeout = 120 * time.Second

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// setupManaged reads the environment; nil without SLUICE_E2E_SOCKET.
func setupManaged() (*managedDaemon, error) {
	sock := os.Getenv("SLUICE_E2E_SOCKET")
	if sock == "" {
		return nil, nil
	}
	tmp := os.Getenv("TMPDIR")
	if tmp == "" || filepath.Clean(tmp) == "/tmp" || strings.HasPrefix(filepath.Clean(tmp), "/tmp/") {
		return nil, fmt.Errorf("SLUICE_E2E_SOCKET needs TMPDIR set to a directory the daemon sees (a service with PrivateTmp=yes has its own /tmp), e.g. TMPDIR=/srv/sluice/e2e")
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	md := &managedDaemon{
		socket:   sock,
		manifest: envOr("SLUICE_E2E_MANIFEST", "/etc/sluice/manifest.json"),
		reload:   envOr("SLUICE_E2E_RELOAD", "systemctl reload sluiced.service"),
		stateDir: envOr("SLUICE_E2E_STATE_DIR", "/var/lib/sluice"),
		runDir:   envOr("SLUICE_E2E_RUN_DIR", "/run/sluice/sandbox"),
		logCmd:   envOr("SLUICE_E2E_LOG", "journalctl -u sluiced.service --no-pager -o cat"),
		c:        client.New(sock),
	}
	cg := os.Getenv("SLUICE_E2E_CGROUP")
	if cg == "" {
		out, err := exec.Command("systemctl", "show", "-P", "ControlGroup", "sluiced.service").Output()
		if err == nil {
			cg = strings.TrimSpace(string(out))
		}
	}
	// Leftovers are looked for in the service's delegated subtree and in
	// the layout outside systemd, so a daemon that fell back is checked too.
	md.layouts = []sandbox.CgroupLayout{{}}
	if cg != "" {
		md.layouts = append(md.layouts, sandbox.CgroupLayout{Service: cg})
	}
	var err error
	if md.orig, err = os.ReadFile(md.manifest); err != nil {
		return nil, fmt.Errorf("the managed daemon's manifest: %w", err)
	}
	if _, err := md.c.Health(context.Background()); err != nil {
		return nil, fmt.Errorf("the managed daemon at %s: %w", sock, err)
	}
	if md.idleDir, err = os.MkdirTemp("", "sluice-e2e-idle"); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(md.idleDir, "empty"), 0o755); err != nil {
		return nil, err
	}
	md.idle, _ = json.Marshal(map[string]any{"schema_version": 1, "base": md.idleDir,
		"tools": map[string]any{"idle": map[string]any{"operation": "read", "roots": []string{"empty"}}}})
	if err := md.load(md.idle); err != nil {
		return nil, err
	}
	if err := md.settle(); err != nil {
		return nil, err
	}
	return md, nil
}

// teardown puts the original manifest back.
func (md *managedDaemon) teardown() error {
	defer md.c.Close()
	defer os.RemoveAll(md.idleDir)
	return md.load(md.orig)
}

// load writes body over the daemon's manifest (atomically), reloads it
// and waits until the daemon serves a new policy version.
func (md *managedDaemon) load(body []byte) error {
	if cur, _ := os.ReadFile(md.manifest); bytes.Equal(cur, body) {
		return nil // loaded already
	}
	ctx := context.Background()
	before, err := md.c.Health(ctx)
	if err != nil {
		return err
	}
	tmp := md.manifest + ".e2e-new"
	if err := os.WriteFile(tmp, body, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, md.manifest); err != nil {
		return err
	}
	if out, err := exec.Command("sh", "-c", md.reload).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", md.reload, err, out)
	}
	err = testutil.Poll(reloadTimeout, func() error {
		h, err := md.c.Health(ctx)
		if err != nil {
			return err
		}
		if h.PolicyVersion == before.PolicyVersion {
			return fmt.Errorf("still %s", h.PolicyVersion)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the daemon did not load the new manifest within %v (%v); its log:\n%s",
			reloadTimeout, err, tail(md.logs(), 30))
	}
	return nil
}

// settle waits until the run dir holds nothing of earlier manifests'
// containers: a reload drains the old pools in the background.
func (md *managedDaemon) settle() error {
	return testutil.Poll(reloadTimeout, func() error {
		if left := md.leftovers(); len(left) > 0 {
			return fmt.Errorf("%d things left %v after the tools went away: %v", len(left), reloadTimeout, left)
		}
		return nil
	})
}

func (md *managedDaemon) leftovers() []string {
	var out []string
	for _, l := range md.layouts {
		out = append(out, sandbox.LeftoversIn(md.runDir, l)...)
	}
	if ns := md.nsRunDir(); ns != md.runDir {
		ents, _ := os.ReadDir(filepath.Join(ns, "rootfs"))
		for _, e := range ents {
			out = append(out, "rootfs (in sluiced's mount namespace) "+e.Name())
		}
	}
	return out
}

// nsRunDir is the run dir as the daemon's own mount namespace shows it
// (/proc/PID/root/…). The service's ProtectSystem= gives sluiced a mount
// namespace of its own, where its rootfs and state areas are tmpfs mounts
// of its own that the host's namespace does not see: what is in them is
// looked at there.
func (md *managedDaemon) nsRunDir() string {
	out, err := exec.Command("systemctl", "show", "-P", "MainPID", "sluiced.service").Output()
	pid := strings.TrimSpace(string(out))
	if err != nil || pid == "" || pid == "0" {
		return md.runDir
	}
	return "/proc/" + pid + "/root" + md.runDir
}

func (md *managedDaemon) logs() string {
	out, _ := exec.Command("sh", "-c", md.logCmd).CombinedOutput()
	return string(out)
}

// commandLog is a managed daemon's log, read when asked for.
type commandLog struct{ md *managedDaemon }

func (l commandLog) String() string { return l.md.logs() }

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// use makes the managed daemon serve manifest: its JSON with "base" set to
// the manifest's directory, unless it names one.
func (md *managedDaemon) use(d *daemon) {
	t := d.t
	t.Helper()
	raw, err := os.ReadFile(d.manifest)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", d.manifest, err)
	}
	if _, ok := m["base"]; !ok {
		abs, _ := filepath.Abs(filepath.Dir(d.manifest))
		m["base"], _ = json.Marshal(abs)
	}
	body, _ := json.Marshal(m)
	if err := md.load(body); err != nil {
		t.Fatal(err)
	}
}

// release loads the idle manifest and waits for the test's containers to go.
func (md *managedDaemon) release(d *daemon) {
	if err := md.load(md.idle); err != nil {
		d.t.Error(err)
		return
	}
	if err := md.settle(); err != nil {
		d.t.Errorf("after the test's manifest was replaced: %v\n%s", err, tail(md.logs(), 30))
	}
}
