//go:build linux

package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
)

// review8Script runs in the container with cwd workspace/src: it settles
// in d (cwd and a held fd of it), lists it, says READY, waits for the
// host's "go" (a file the host creates after its edits: an event, not a
// timer), then tries everything a command can do relative to where it
// sits and prints what it got.
const review8Script = `
import os, sys
os.chdir("d")
held = os.open(".", os.O_RDONLY)
print("BEFORE", sorted(os.listdir(".")), sorted(os.listdir(held)), open("a").read().strip(), flush=True)
print("READY", flush=True)
go = sys.argv[1] + "/go"
while not os.path.exists(go):
    os.sched_yield()
def attempt(what, fn):
    try:
        print(what, repr(fn()), flush=True)
    except OSError as e:
        print(what, "refused", e.errno, flush=True)
attempt("list-cwd", lambda: sorted(os.listdir(".")))
attempt("list-held", lambda: sorted(os.listdir(held)))
attempt("read-new", lambda: open("SECRET").read())
attempt("read-a", lambda: open("a").read())
attempt("read-sub", lambda: open("sub/SECRET2").read())
attempt("list-sibling", lambda: sorted(os.listdir("../keys.pem")))
attempt("read-sibling", lambda: open("../keys.pem/SECRET").read())
attempt("stat-sibling", lambda: os.lstat("../keys.pem").st_mode)
attempt("walk-src", lambda: sorted(os.path.join(r, f) for r, _, fs in os.walk(sys.argv[1]) for f in fs))
print("DONE", flush=True)
`

// TestReview8CwdRenamedDuringCommand (black-box, over the socket): while
// an execute command sits in an allowed directory (its cwd, and an fd it
// holds), the host renames that directory to a never name and puts a
// secret in it. Nothing of the secret (its name or content) reaches the
// command, relative to its cwd, through its held fd, through "..", or by
// a walk of the mount.
func TestReview8CwdRenamedDuringCommand(t *testing.T) {
	fx, m := viewsFixture(t, map[string]string{
		"probe": `"commands":[["python3","-c",` + mustString(review8Script) + `,"{ARG}"]],"pool":0,"timeout_ms":60000`,
	})
	src := filepath.Join(fx.Base, "workspace/src")
	m2, err := os.ReadFile(m)
	testutil.Must(t, err)
	testutil.Must(t, os.WriteFile(m, []byte(strings.ReplaceAll(string(m2), "{ARG}", src)), 0o644))
	testutil.Must(t, os.MkdirAll(filepath.Join(src, "d/sub"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "d/a"), []byte("a-before\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "d/sub/b"), []byte("b\n"), 0o644))
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.UIDRange = viewsUIDs })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startStream(h.c, ctx, api.CallRequest{Tool: "probe", Args: json.RawMessage(`{}`)})
	var out string
	for !strings.Contains(out, "READY\n") {
		ev := s.next(t, "READY")
		switch ev.Event {
		case "output":
			out += ev.Data
		case "result":
			t.Fatalf("the probe ended before READY: %s %q", ev.Reason, out)
		}
	}
	// The host's edits, then "go".
	testutil.Must(t, os.Rename(filepath.Join(src, "d"), filepath.Join(src, "keys.pem")))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "keys.pem/SECRET"), []byte("SLUICE-SECRET-R8\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "keys.pem/sub/SECRET2"), []byte("SLUICE-SECRET-R8\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "keys.pem/a"), []byte("SLUICE-SECRET-R8-A\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "go"), nil, 0o644))
	for !strings.Contains(out, "DONE\n") {
		ev := s.next(t, "DONE")
		switch ev.Event {
		case "output":
			out += ev.Data
		case "result":
			if !strings.Contains(out, "DONE\n") {
				t.Fatalf("the probe ended before DONE: %s %q", ev.Reason, out)
			}
		}
	}
	t.Logf("probe:\n%s", out)
	after := out[strings.Index(out, "READY\n"):]
	for _, leak := range []string{"SLUICE-SECRET", "SECRET"} {
		if strings.Contains(after, leak) {
			t.Errorf("the command saw %q after its directory was renamed to a never name:\n%s", leak, after)
		}
	}
	if !strings.Contains(out, fmt.Sprintf("BEFORE ['a', 'sub'] ['a', 'sub'] a-before")) {
		t.Errorf("the probe did not start as expected:\n%s", out)
	}
	cancel()
	<-s.done
}

// TestReview8RecycledUIDReachesNoOtherView (black-box): with a uid range
// of two ids, a container of tool b soon runs as a uid a container of
// tool a ran as a moment before. Tool b's container reaches nothing of
// tool a's view: not by a's mount path, nor by a search of its whole
// file system.
func TestReview8RecycledUIDReachesNoOtherView(t *testing.T) {
	fx, m := viewsFixture(t, map[string]string{
		"a": `"commands":[["sh","-c","id -u; cat note.txt"]],"pool":0`,
	})
	src := filepath.Join(fx.Base, "workspace/src")
	other := filepath.Join(fx.Base, "workspace/other")
	testutil.Must(t, os.MkdirAll(other, 0o755))
	testutil.Must(t, os.Chmod(other, 0o755))
	probe := fmt.Sprintf(`id -u; cat %[1]s/note.txt; ls %[1]s; echo FIND; find / \( -path /proc -o -path /sys \) -prune -o -name note.txt -print 2>/dev/null; echo END; grep -h sluice /proc/self/mountinfo`, src)
	body, err := os.ReadFile(m)
	testutil.Must(t, err)
	b := strings.Replace(string(body), `,"a":{`, `,"b":{"operation":"execute","mounts":["workspace/other"],"cwd":"workspace/other","pool":0,"commands":[["sh","-c",`+mustString(probe)+`]]},"a":{`, 1)
	testutil.Must(t, os.WriteFile(m, []byte(b), 0o644))
	var runDir string
	h := start(t, m, securefs.ModeAuto, func(c *Config) {
		c.UIDRange = sandbox.IDRange{First: 0x7F030010, Last: 0x7F030011}
		runDir = c.RunDir
	})
	uidOf := func(out string) string { return strings.SplitN(strings.TrimSpace(out), "\n", 2)[0] }
	// A container is destroyed in the background after its call; until
	// then its uid is out of use, and on a busy machine the next tool took
	// the other uid every time. Each call waits for the last one's
	// container to be gone (its uid is given back right after its rootfs
	// goes), so a uid is recycled whenever one is free.
	settled := func() {
		waitFor(t, "the last call's container to go", func() bool { return sandbox.Containers(runDir) == 0 })
	}
	seen := map[string]bool{}
	recycled := false
	for i := 0; i < 20 && !recycled; i++ {
		settled()
		res, raw := h.call("a", map[string]any{})
		out := callOutput(res)
		if !strings.Contains(out, viewContent) {
			t.Fatalf("tool a does not read its own view: %s", raw)
		}
		seen[uidOf(out)] = true
		settled()
		res, raw = h.call("b", map[string]any{})
		out = callOutput(res)
		if res.Reason != api.ReasonAllowed {
			t.Fatalf("tool b: %s", raw)
		}
		found := ""
		if i, j := strings.Index(out, "FIND\n"), strings.Index(out, "END\n"); i >= 0 && j > i {
			found = strings.TrimSpace(out[i+5 : j])
		}
		if strings.Contains(out, viewContent) || found != "" || !strings.Contains(out, "END\n") {
			t.Errorf("tool b's container (uid %s) reached tool a's view:\n%s", uidOf(out), out)
		}
		recycled = seen[uidOf(out)]
	}
	if !recycled {
		t.Errorf("tool b never ran as a uid tool a had run as: %v", seen)
	}
}

// TestReview8PooledCwdReplacedBetweenCalls (black-box): a pooled
// container settles in its cwd (a directory beneath the mount) before
// the call that uses it. Between two calls the host renames that
// directory to a never name, fills it, and makes a new one at the path.
// The second call (from the pool: its cwd is the old directory's entry)
// sees nothing of the renamed directory, and lists the new one, as a
// command started after the edit must.
func TestReview8PooledCwdReplacedBetweenCalls(t *testing.T) {
	fx := escapetest.Build(t)
	src := filepath.Join(fx.Base, "workspace/src")
	testutil.Must(t, os.MkdirAll(filepath.Join(src, "d"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "d/a"), []byte("a\n"), 0o644))
	m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{
		"look":{"operation":"execute","mounts":["workspace/src"],"cwd":"workspace/src/d","never":[".env","*.pem"],
			"commands":[["sh","-c","echo LS; ls; echo CAT; cat SECRET a 2>&1; ls ../keys.pem 2>&1; echo END"]],"pool":1}}}`)
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.UIDRange = viewsUIDs })
	look := func() string {
		t.Helper()
		res, body := h.call("look", map[string]any{})
		if res.Reason != api.ReasonAllowed {
			t.Fatalf("look: %s", body)
		}
		return callOutput(res)
	}
	if got := look(); !strings.Contains(got, "LS\na\nCAT") {
		t.Fatalf("first look: %q", got)
	}
	// Let the pool refill, from before the edit: a second look uses it.
	if got := look(); !strings.Contains(got, "LS\na\nCAT") {
		t.Fatalf("second look: %q", got)
	}
	testutil.Must(t, os.Rename(filepath.Join(src, "d"), filepath.Join(src, "keys.pem")))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "keys.pem/SECRET"), []byte("SLUICE-SECRET-R8\n"), 0o644))
	testutil.Must(t, os.Mkdir(filepath.Join(src, "d"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(src, "d/new"), []byte("new\n"), 0o644))
	for i := range 3 {
		got := look()
		t.Logf("look %d after the edit:\n%s", i, got)
		if strings.Contains(got, "SLUICE-SECRET") || strings.Contains(got, "\nSECRET\n") {
			t.Errorf("look %d saw the renamed directory's secret:\n%s", i, got)
		}
		if !strings.Contains(got, "LS\nnew\nCAT") {
			t.Errorf("look %d does not list the directory now at its cwd's path:\n%s", i, got)
		}
	}
}
