//go:build linux

package daemon

import (
	"archive/zip"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// tinyWheel is a minimal pure-python wheel: enough for pip download to
// read its metadata and keep it.
func tinyWheel(t *testing.T) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, body := range map[string]string{
		"tinypkg/__init__.py":            "",
		"tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
		"tinypkg-1.0.dist-info/WHEEL":    "Wheel-Version: 1.0\nGenerator: sluice-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"tinypkg-1.0.dist-info/RECORD":   "",
	} {
		w, err := zw.Create(name)
		testutil.Must(t, err)
		_, err = w.Write([]byte(body))
		testutil.Must(t, err)
	}
	testutil.Must(t, zw.Close())
	return buf.Bytes()
}

// bareRepo makes a bare git repository with one commit, prepared for
// git's dumb HTTP protocol (served as static files).
func bareRepo(t *testing.T) string {
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "repo.git")
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q", "-b", "main", work)
	testutil.Must(t, os.WriteFile(filepath.Join(work, "README"), []byte("cloned through the proxy\n"), 0o644))
	git("-C", work, "add", "README")
	git("-C", work, "commit", "-q", "-m", "one")
	git("clone", "-q", "--bare", work, bare)
	git("-C", bare, "update-server-info")
	return bare
}

// TestExecEgressClients: package managers and git honour the proxy
// variables: pip download from a local index, git clone over HTTP. The
// upstream sees their requests; each tool's connections are recorded.
func TestExecEgressClients(t *testing.T) {
	testutil.RequireRoot(t)
	var missing []string
	for _, bin := range []string{"/usr/bin/python3", "/usr/bin/git"} {
		if _, err := os.Stat(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		t.Skipf("SKIPPED: this host lacks %v to bind into containers", missing)
	}
	if err := exec.Command("/usr/bin/python3", "-m", "pip", "--version").Run(); err != nil {
		t.Skip("SKIPPED: the host's /usr/bin/python3 has no pip")
	}
	wheel := tinyWheel(t)
	bare := bareRepo(t)
	up := startUpstream(t, func(mux *http.ServeMux) {
		mux.HandleFunc("/simple/tinypkg/", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `<!DOCTYPE html><html><body><a href="/files/tinypkg-1.0-py3-none-any.whl">tinypkg-1.0-py3-none-any.whl</a></body></html>`)
		})
		mux.HandleFunc("/files/tinypkg-1.0-py3-none-any.whl", func(w http.ResponseWriter, r *http.Request) {
			w.Write(wheel)
		})
		mux.Handle("/repo.git/", http.StripPrefix("/repo.git/", http.FileServer(http.Dir(bare))))
	})
	allowed := "localhost:" + up.port
	eg := `"egress":{"hosts":["` + allowed + `"],"schemes":["http"],"insecure_allow_private":true},"pool":0,"timeout_ms":60000`
	manifest := `{"schema_version":1,"tools":{` +
		`"pip":{"operation":"execute","commands":[["sh","-c","python3 -m pip download --disable-pip-version-check --no-cache-dir --index-url http://` + allowed + `/simple/ -d /tmp/dl tinypkg && ls /tmp/dl"]],` + eg + `},` +
		`"git":{"operation":"execute","commands":[["sh","-c","git clone -q http://` + allowed + `/repo.git /tmp/r && cat /tmp/r/README"]],` + eg + `}}}`
	h := start(t, writeManifest(t, t.TempDir(), manifest), securefs.ModeAuto)
	for tool, want := range map[string]string{"pip": "tinypkg-1.0-py3-none-any.whl", "git": "cloned through the proxy"} {
		res, body := h.call(tool, map[string]any{})
		out := ""
		if res.Output != nil {
			out = *res.Output
		}
		if res.Reason != api.ReasonAllowed || !res.OK || !strings.Contains(out, want) {
			t.Errorf("%s: want %q in the output: %s", tool, want, body)
		}
		if n := bytes.Count(h.ledger(), []byte(`"call_id":"`+res.CallID+`"`)); n < 3 { // decision, result, and connections
			t.Errorf("%s: %d records of call %s, want its connections too", tool, n, res.CallID)
		}
	}
	seen := strings.Join(up.seen(), " ")
	for _, p := range []string{"/simple/tinypkg/", "/files/tinypkg-1.0-py3-none-any.whl", "/repo.git/info/refs"} {
		if !strings.Contains(seen, p) {
			t.Errorf("upstream never saw %s: %s", p, seen)
		}
	}
}
