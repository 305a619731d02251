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
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestInitFirstHour: `sluice init` on a sample project, `sluiced --check`
// on what it wrote, a daemon serving it: the agent (uid 1000) reads a
// project file, is refused .env, runs the detected test command, is
// refused a command the patterns do not allow, and its write waits for
// root, the approver, who may read but not run the tests.
//
// The sample is a Go project where the sandbox can run go test (a Go
// toolchain under /usr, and Linux 6.3+ for the build cache it needs);
// else a Python one run with python3 -m unittest.
func TestInitFirstHour(t *testing.T) {
	testutil.RequireRoot(t)
	proj := filepath.Join(t.TempDir(), "calc")
	sample, argv, passed := goSample()
	if sample == nil {
		sample, argv, passed = pythonSample()
	}
	if sample == nil {
		t.Fatal("neither go (under /usr, with Linux 6.3+) nor /usr/bin/python3: no test command to run")
	}
	t.Logf("sample project: %v", argv)
	sample[".env"] = "SECRET=init-e2e-secret\n"
	for name, body := range sample {
		p := filepath.Join(proj, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	manifest := filepath.Join(t.TempDir(), "calc.toml")
	out, err := exec.Command(filepath.Join(binDir, "sluice"), "init", proj, "--agent", "1000", "--output", manifest).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice init: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("sluiced --check --manifest "+manifest)) {
		t.Errorf("sluice init does not say to check it:\n%s", out)
	}
	out, err = exec.Command(filepath.Join(binDir, "sluiced"), "--check", "--manifest", manifest).CombinedOutput()
	if err != nil || !bytes.HasPrefix(out, []byte("ok: ")) || bytes.Contains(out, []byte("WARN")) {
		m, _ := os.ReadFile(manifest)
		t.Fatalf("sluiced --check: %v\n%s\n%s", err, out, m)
	}

	d := startOwnDaemon(t, manifest)
	agent := client.NewWithDialer(d.socket, testutil.DialAs(d.socket, 1000))
	defer agent.Close()
	ctx := context.Background()
	call := func(c *client.Client, tool string, args any) *api.CallResult {
		t.Helper()
		b, _ := json.Marshal(args)
		res, err := c.Call(ctx, api.CallRequest{Tool: tool, Args: b})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		return res
	}
	output := func(res *api.CallResult) string {
		if res.Output == nil {
			return res.Stderr
		}
		return *res.Output + res.Stderr
	}

	// Paths start at the project: the manifest's base.
	name := "calc.go"
	if _, ok := sample[name]; !ok {
		name = "calc.py"
	}
	if res := call(agent, "read_file", map[string]string{"path": name}); res.Verdict != api.VerdictAllow || !strings.Contains(output(res), "dd") {
		t.Errorf("read_file %s: %s/%s %q", name, res.Verdict, res.Reason, output(res))
	}
	if res := call(agent, "read_file", map[string]string{"path": ".env"}); res.Reason != api.ReasonNeverListed || strings.Contains(output(res), "init-e2e-secret") {
		t.Errorf("read_file .env: %s/%s", res.Verdict, res.Reason)
	}
	if res := call(agent, "run_tests", map[string]any{"argv": argv}); res.Verdict != api.VerdictAllow || res.ExitCode == nil || *res.ExitCode != 0 || !strings.Contains(output(res), passed) {
		t.Errorf("run_tests %v: %s/%s exit %v %q", argv, res.Verdict, res.Reason, res.ExitCode, output(res))
	}
	if res := call(agent, "run_tests", map[string]any{"argv": []string{argv[0], "-c", "true"}}); res.Reason != api.ReasonCommandNotAllowed {
		t.Errorf("run_tests %s -c true: %s/%s", argv[0], res.Verdict, res.Reason)
	}
	// Root approves; it may look, not change nor run.
	if res := call(d.c, "read_file", map[string]string{"path": name}); res.Verdict != api.VerdictAllow {
		t.Errorf("root read_file: %s/%s", res.Verdict, res.Reason)
	}
	if res := call(d.c, "run_tests", map[string]any{"argv": argv}); res.Reason != api.ReasonPrincipalNotAllowed {
		t.Errorf("root run_tests: %s/%s", res.Verdict, res.Reason)
	}

	// A write waits for the approver, then lands.
	done := make(chan *api.CallResult, 1)
	go func() {
		b, _ := json.Marshal(map[string]string{"path": "NOTES.md", "content": "from the agent\n"})
		res, err := agent.Call(ctx, api.CallRequest{Tool: "write_file", Args: b})
		if err != nil {
			res = &api.CallResult{Reason: api.Reason(err.Error())}
		}
		done <- res
	}()
	var list *api.Approvals
	if err := testutil.Poll(30*time.Second, func() error {
		var err error
		if list, err = d.c.Approvals(ctx); err != nil {
			return err
		}
		if len(list.Approvals) != 1 {
			return fmt.Errorf("%d waiting, want 1", len(list.Approvals))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(proj, "NOTES.md")); err == nil {
		t.Fatal("written before approval")
	}
	if _, err := d.c.Decide(ctx, list.Approvals[0].ApprovalID, true, "ok"); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.Verdict != api.VerdictAllow {
		t.Errorf("approved write: %s/%s", res.Verdict, res.Reason)
	}
	if b, _ := os.ReadFile(filepath.Join(proj, "NOTES.md")); string(b) != "from the agent\n" {
		t.Errorf("NOTES.md: %q", b)
	}
}

// goSample is a Go project, when the sandbox can run go test on it: go
// under /usr (what containers see), and a kernel that binds caches.
func goSample() (map[string]string, []string, string) {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	var major, minor int
	fmt.Sscanf(string(b), "%d.%d", &major, &minor)
	goBin, err := exec.LookPath("go")
	if real, e := filepath.EvalSymlinks(goBin); e == nil {
		goBin = real
	}
	if err != nil || !strings.HasPrefix(goBin, "/usr/") || major < 6 || major == 6 && minor < 3 {
		return nil, nil, ""
	}
	return map[string]string{
		"go.mod":       "module example.com/calc\n\ngo 1.22\n",
		"calc.go":      "package calc\n\nfunc Add(a, b int) int { return a + b }\n",
		"calc_test.go": "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"1+2\")\n\t}\n}\n",
	}, []string{"go", "test", "-run", "TestAdd", "./..."}, "ok  \texample.com/calc"
}

func pythonSample() (map[string]string, []string, string) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		return nil, nil, ""
	}
	return map[string]string{
		"calc.py":            "def add(a, b):\n    return a + b\n",
		"tests/test_calc.py": "import unittest\n\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n",
	}, []string{"python3", "-m", "unittest", "discover", "-s", "tests", "-v"}, "OK"
}
