//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// mcpTSManifest is served to the TypeScript client; the caller (root) is
// an approver that may call every tool, so the client reloads with the
// same binary; it approves as ops (uid 65534), since nobody approves a
// call of its own principal.
func mcpTSManifest(base, extra string) string {
	// "run" sleeps after its last line: the TypeScript SDK runs a
	// progress notification's handler in a microtask but a response's at
	// once, so a progress notification read together with the call's
	// response (the command's last output, then its exit, microseconds
	// apart) is dropped by the client. The result carries the whole
	// output either way; the test is of progress while a command runs.
	return `{"schema_version":1,"base":"` + base + `",
	  "principals":{"me":{"uids":[0],"approver":true,"tools":["*"]},"ops":{"uids":[65534],"approver":true,"tools":[]}},
	  "tools":{
	    "read_file":{"operation":"read","roots":["workspace/src"],"never":[".env","*.pem","private/**"],"max_bytes":64},
	    "write_file":{"operation":"write","roots":["workspace/src"]},
	    "ask_read":{"operation":"read","roots":["workspace/src"],"approval":"human"},
	    "run":{"operation":"execute","commands":[["sh","-c","echo one; sleep 0.3; echo two; sleep 0.3"]],"mounts":["workspace/src"],"pool":0},
	    "hold":{"operation":"execute","commands":[["sh","-c","echo started; sleep 30"]],"mounts":["workspace/src"],"timeout_ms":60000,"pool":0}` +
		extra + `}}`
}

// TestMCPTypeScriptClient: the official TypeScript SDK
// (@modelcontextprotocol/sdk, pinned in e2e/mcp/package-lock.json) spawns
// the real `sluice mcp` over stdio against the real sluiced and runs
// e2e/mcp/client.mjs: initialize, list with hints and schemas (the SDK
// validates each structuredContent against its outputSchema), an allowed
// read, its source in structuredContent and _meta, denials as tool
// errors, truncation, binary output as a blob, execute with progress, a
// cancel (the container is gone and the ledger says cancelled), an
// approval given from a second client while the call waits, and a reload
// that sends tools/list_changed.
func TestMCPTypeScriptClient(t *testing.T) {
	testutil.RequireRoot(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: the MCP e2e needs node and npm (scripts/deps.sh installs them)")
	}
	dir, _ := filepath.Abs("mcp")
	if _, err := os.Stat(filepath.Join(dir, "node_modules/@modelcontextprotocol/sdk")); err != nil {
		cmd := exec.Command("npm", "ci", "--prefer-offline", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in e2e/mcp (the pinned TypeScript SDK): %v\n%s", err, out)
		}
	}
	fx := escapetest.Build(t)
	os.Chmod(fx.Base, 0o755)
	if err := os.WriteFile(filepath.Join(fx.Base, "workspace/src/blob.bin"), []byte{0xff, 0xfe, 0, 1, 2, 0x80}, 0o644); err != nil {
		t.Fatal(err)
	}
	m := writeFile(t, t.TempDir(), "manifest.json", mcpTSManifest(fx.Base, ""))
	next := writeFile(t, t.TempDir(), "next.json", mcpTSManifest(fx.Base,
		`,"read_tests":{"operation":"read","roots":["workspace/tests"]}`))
	d := startOwnDaemon(t, m)
	openSocket(t, d)
	approver := agentCLI(t, d.socket).Path // a copy uid 65534 may run

	cmd := exec.Command(node, filepath.Join(dir, "client.mjs"))
	cmd.Env = append(os.Environ(), "SLUICE_BIN="+filepath.Join(binDir, "sluice"), "SLUICE_SOCKET="+d.socket,
		"SLUICE_MANIFEST="+m, "SLUICE_MANIFEST_NEXT="+next, "SLUICE_APPROVER_BIN="+approver)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, out, &stderr)
	}
	want := []string{"initialize", "list", "read", "provenance", "denials", "truncation", "binary", "execute with progress",
		"cancel", "approval", "reload changes the list", "close", "stderr"}
	var got []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var c struct {
			Case   string          `json:"case"`
			OK     bool            `json:"ok"`
			MS     float64         `json:"ms"`
			Detail json.RawMessage `json:"detail"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("client.mjs printed %q: %v", sc.Text(), err)
		}
		got = append(got, c.Case)
		if !c.OK {
			t.Errorf("%s: %s", c.Case, c.Detail)
		} else {
			t.Logf("%s: ok (%.0f ms)", c.Case, c.MS)
		}
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("cases %q, want %q", got, want)
	}
	// The cancel ended the call in the daemon: its container is gone and
	// its result record says cancelled, by whom.
	if err := testutil.Poll(20*time.Second, func() error {
		if n := d.containers(); n != 0 {
			return fmt.Errorf("%d containers still running after the cancel", n)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	ledger, err := os.ReadFile(d.ledger())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range bytes.Split(ledger, []byte("\n")) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil && rec["kind"] == "result" && rec["tool"] == "hold" {
			found = true
			if rec["reason"] != "cancelled" || rec["detail"] != "cancelled by me" {
				t.Errorf("the cancelled call's result record: %v", rec)
			}
		}
	}
	if !found {
		t.Error("no result record for the cancelled call")
	}
	d.stop()
	if left := d.leftovers(); len(left) > 0 {
		t.Errorf("left behind after sluiced stopped: %v", left)
	}
}
