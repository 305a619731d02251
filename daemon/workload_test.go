//go:build linux

package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/daemon/transport"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// cgroup2Mount returns where the cgroup v2 hierarchy is mounted (on a
// hybrid host, systemd's /sys/fs/cgroup/unified).
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if ok && strings.HasPrefix(post, "cgroup2 ") {
			if f := strings.Fields(pre); len(f) >= 5 && f[3] == "/" {
				return f[4]
			}
		}
	}
	t.Skip("KERNEL LACKS FEATURE: no cgroup v2 hierarchy is mounted; workload principals need one")
	return ""
}

// TestWorkloadChild is the child of TestWorkloadPrincipals: it makes one
// call from the cgroup its parent started it in, and prints the result.
func TestWorkloadChild(t *testing.T) {
	spec := os.Getenv("SLUICE_WORKLOAD_CHILD")
	if spec == "" {
		t.Skip("the child of TestWorkloadPrincipals")
	}
	var req struct {
		Socket, Tool string
		Args         map[string]string
	}
	if err := json.Unmarshal([]byte(spec), &req); err != nil {
		t.Fatal(err)
	}
	c := client.New(req.Socket)
	defer c.Close()
	a, _ := json.Marshal(req.Args)
	body, _ := json.Marshal(api.CallRequest{Tool: req.Tool, Args: a})
	code, b, err := c.CallRaw(context.Background(), body)
	if err != nil || code != 200 {
		t.Fatalf("%d %s %v", code, b, err)
	}
	fmt.Printf("RESULT:%s\n", b)
}

// TestWorkloadPrincipals: a peer is mapped by the cgroup the kernel says
// it is in (SO_PEERPIDFD, /proc, the pidfd still alive), not by its uid
// alone: root in a "pod" cgroup is the narrow principal pods, root
// elsewhere is ops, and the ledger names the cgroup.
func TestWorkloadPrincipals(t *testing.T) {
	testutil.RequireRoot(t)
	if err := transport.PeerCgroupSupported(); err != nil {
		t.Skipf("KERNEL LACKS FEATURE: %v", err)
	}
	mnt := cgroup2Mount(t)
	base := "/sluice-test-" + filepath.Base(t.TempDir())
	pod := base + "/kubepods.slice/pod-1.slice/c1.scope"
	svc := base + "/system.slice/review@pr-7.service/payload"
	for _, cg := range []string{pod, svc} {
		if err := os.MkdirAll(filepath.Join(mnt, cg), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for d := filepath.Join(mnt, cg); strings.HasPrefix(d, filepath.Join(mnt, base)); d = filepath.Dir(d) {
				os.Remove(d)
			}
		})
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "src", "a.txt"), []byte("hello\n"), 0o644)
	manifest := filepath.Join(t.TempDir(), "m.json")
	os.WriteFile(manifest, []byte(`{"schema_version":1,"base":"`+dir+`",
	 "principals":{
	  "pods":{"cgroups":["`+base+`/kubepods.slice/**"],"uids":[0],"tools":["read_file"]},
	  "reviewer":{"units":["review@*.service"],"tools":["stat_file"]},
	  "ops":{"uids":[0],"tools":["*"],"approver":true}},
	 "tools":{"read_file":{"operation":"read","roots":["src"]},
	          "stat_file":{"operation":"stat","roots":["src"]},
	          "write_file":{"operation":"write","roots":["src"]}}}`), 0o600)
	h := start(t, manifest, securefs.ModeAuto)

	from := func(cgroup, tool string, args map[string]string) *api.CallResult {
		t.Helper()
		return callFromCgroup(t, mnt, h.socket, cgroup, tool, args)
	}

	if res := from(pod, "read_file", map[string]string{"path": "src/a.txt"}); res.Reason != api.ReasonAllowed {
		t.Fatalf("pod read: %+v", res)
	}
	// A process in a delegated sub-cgroup of review@pr-7.service is reviewer.
	if res := from(svc, "stat_file", map[string]string{"path": "src/a.txt"}); res.Reason != api.ReasonAllowed {
		t.Fatalf("reviewer stat: %+v", res)
	}
	if res := from(svc, "read_file", map[string]string{"path": "src/a.txt"}); res.Reason != api.ReasonPrincipalNotAllowed {
		t.Fatalf("reviewer read: %s, want principal_not_allowed", res.Reason)
	}
	if res := from(pod, "write_file", map[string]string{"path": "src/b.txt", "content": "x"}); res.Verdict != api.VerdictDeny || res.Reason != api.ReasonPrincipalNotAllowed {
		t.Fatalf("pod write: %s %s, want deny principal_not_allowed (uid 0 in a pod is pods, not ops)", res.Verdict, res.Reason)
	}
	if _, err := os.Stat(filepath.Join(dir, "src", "b.txt")); err == nil {
		t.Fatal("the pod's write landed")
	}
	// The same uid outside the pod's cgroup is ops.
	if res, body := h.call("write_file", map[string]string{"path": "src/c.txt", "content": "x"}); res.Reason != api.ReasonAllowed {
		t.Fatalf("ops write: %s", body)
	}
	l := h.ledger()
	var pods, ops, reviewer int
	for line := range bytes.SplitSeq(l, []byte("\n")) {
		var rec struct {
			Kind      string
			Tool      string
			Principal *struct {
				Name, Cgroup string
			}
		}
		if json.Unmarshal(line, &rec) != nil || rec.Kind != "decision" || rec.Principal == nil {
			continue
		}
		switch rec.Principal.Name {
		case "pods":
			pods++
			if rec.Principal.Cgroup != pod {
				t.Errorf("a pods record names cgroup %q, want %q", rec.Principal.Cgroup, pod)
			}
		case "reviewer":
			reviewer++
			if rec.Principal.Cgroup != svc {
				t.Errorf("a reviewer record names cgroup %q, want %q", rec.Principal.Cgroup, svc)
			}
		case "ops":
			ops++
			if rec.Principal.Cgroup == "" || strings.HasPrefix(rec.Principal.Cgroup, base) {
				t.Errorf("an ops record names cgroup %q", rec.Principal.Cgroup)
			}
		}
	}
	if pods != 2 || ops != 1 || reviewer != 2 {
		t.Fatalf("decisions: pods %d, ops %d, reviewer %d; want 2, 1 and 2\n%s", pods, ops, reviewer, l)
	}
}

// ownCgroupField is the "cgroup" member a record of this process's calls
// carries: its cgroup v2 path where the kernel can name a peer by pidfd,
// none where it cannot.
func ownCgroupField(t *testing.T) string {
	t.Helper()
	if transport.PeerCgroupSupported() != nil {
		return ""
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if p, ok := bytes.CutPrefix(line, []byte("0::")); ok {
			q, _ := json.Marshal(string(p))
			return `"cgroup":` + string(q) + ","
		}
	}
	t.Fatal("no cgroup v2 line in /proc/self/cgroup")
	return ""
}
