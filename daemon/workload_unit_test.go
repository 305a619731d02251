//go:build linux

package daemon

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/daemon/transport"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// callFromCgroup makes one call over socket from a child process started
// in cgroup (a path beneath the cgroup v2 mount mnt), through
// TestWorkloadChild, and returns its result.
func callFromCgroup(t *testing.T, mnt, socket, cgroup, tool string, args map[string]string) *api.CallResult {
	t.Helper()
	cg, err := os.Open(filepath.Join(mnt, cgroup))
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	spec, _ := json.Marshal(map[string]any{"Socket": socket, "Tool": tool, "Args": args})
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkloadChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SLUICE_WORKLOAD_CHILD="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	_, after, ok := bytes.Cut(out, []byte("RESULT:"))
	if !ok {
		t.Fatalf("child printed no result:\n%s", out)
	}
	line, _, _ := bytes.Cut(after, []byte("\n"))
	var res api.CallResult
	if err := json.Unmarshal(line, &res); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	return &res
}

// TestWorkloadUnitNotNamedBeneath: a service with Delegate=yes (or a
// user's systemd --user manager) may create cgroups beneath itself and
// name them as it likes. A cgroup it names "deploy.service" beneath
// review@pr-7.service is still review@pr-7.service's, never the unit
// deploy.service: the unit is the shallowest service or scope of the
// path, which only the (root) service manager creates.
func TestWorkloadUnitNotNamedBeneath(t *testing.T) {
	testutil.RequireRoot(t)
	if err := transport.PeerCgroupSupported(); err != nil {
		t.Skipf("KERNEL LACKS FEATURE: %v", err)
	}
	mnt := cgroup2Mount(t)
	base := "/sluice-test-" + filepath.Base(t.TempDir())
	spoof := base + "/system.slice/review@pr-7.service/payload/deploy.service"
	if err := os.MkdirAll(filepath.Join(mnt, spoof), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for d := filepath.Join(mnt, spoof); strings.HasPrefix(d, filepath.Join(mnt, base)); d = filepath.Dir(d) {
			os.Remove(d)
		}
	})
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "src"), 0o755)
	manifest := filepath.Join(t.TempDir(), "m.json")
	os.WriteFile(manifest, []byte(`{"schema_version":1,"base":"`+dir+`",
	 "principals":{
	  "deployer":{"units":["deploy.service"],"tools":["write_file"]},
	  "reviewer":{"units":["review@*.service"],"tools":["stat_file"]},
	  "ops":{"uids":[0],"tools":["*"],"approver":true}},
	 "tools":{"stat_file":{"operation":"stat","roots":["src"]},
	          "write_file":{"operation":"write","roots":["src"]}}}`), 0o600)
	h := start(t, manifest, securefs.ModeAuto)

	res := callFromCgroup(t, mnt, h.socket, spoof, "write_file", map[string]string{"path": "src/pwn.txt", "content": "x"})
	if res.Verdict != api.VerdictDeny || res.Reason != api.ReasonPrincipalNotAllowed {
		t.Fatalf("a write from %s: %s %s; want deny principal_not_allowed (it is reviewer, not deployer)", spoof, res.Verdict, res.Reason)
	}
	if _, err := os.Stat(filepath.Join(dir, "src", "pwn.txt")); err == nil {
		t.Fatal("the write of a cgroup named deploy.service beneath review@pr-7.service landed")
	}
	if res := callFromCgroup(t, mnt, h.socket, spoof, "stat_file", map[string]string{"path": "src"}); res.Reason != api.ReasonAllowed {
		t.Fatalf("stat from %s: %s, want allowed (reviewer)", spoof, res.Reason)
	}
}
