//go:build linux

package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestExecutePathPatterns: over the socket, a path element allows an
// argument the kernel resolves beneath its root — relative to the
// command's working directory, absolute, through a symlink that stays —
// and the command sees that file; ".." out of the root, an absolute path
// outside, symlinks out (relative, absolute, by a directory, by /proc), a
// never-listed name (as written and through a symlink), a FIFO, a device
// and a missing file are all refused, and nothing secret leaves. The
// allowed decision's record keeps what the kernel resolved.
func TestExecutePathPatterns(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	base := fx.Base
	m := writeManifest(t, base, `{"schema_version":1,"tools":{
	  "cat":{"operation":"execute","mounts":["workspace/src","workspace/tests"],"cwd":"workspace/src","pool":0,
	    "never":[".env","*.pem","private/**"],
	    "commands":[["cat",{"path":["workspace/src"]}],
	                ["head","-c",{"regex":"[0-9]+"},{"path":["workspace/tests"]}],
	                ["ls",{"rest":{"path":["workspace/src"]}}]],
	    "examples":{"match":[["cat","a.py"],["head","-c","5","`+base+`/workspace/tests/t.py"]],
	                "not_match":[["cat","../secret.txt"],["cat",".env"],["cat","/etc/passwd"]]}}}}`)
	h := start(t, m, securefs.ModeAuto)
	for _, c := range []struct {
		argv []string
		rule string // "" refused: command_not_allowed
		want string // in stdout
	}{
		{[]string{"cat", "a.py"}, "tools.cat.commands[0]", "print('hello')"},
		{[]string{"cat", "./sub/../a.py"}, "tools.cat.commands[0]", "print('hello')"},
		{[]string{"cat", base + "/workspace/src/sub/b.txt"}, "tools.cat.commands[0]", "b\n"},
		{[]string{"cat", "in_link"}, "tools.cat.commands[0]", "print('hello')"},
		{[]string{"cat", "in_dir_link/deep/c.txt"}, "tools.cat.commands[0]", "c\n"},
		{[]string{"head", "-c", "6", base + "/workspace/tests/t.py"}, "tools.cat.commands[1]", "import"},
		{[]string{"ls", "a.py", "sub"}, "tools.cat.commands[2]", "a.py\n"},
		{[]string{"ls"}, "tools.cat.commands[2]", ""},
		// Escapes by "..", lexically: the kernel is not asked.
		{[]string{"cat", "../secret.txt"}, "", ""},
		{[]string{"cat", "sub/../../secret.txt"}, "", ""},
		{[]string{"cat", "../../secret.txt"}, "", ""},
		{[]string{"head", "-c", "6", "../tests/t.py"}, "", ""}, // beneath the root only through ".."
		// Absolute paths outside the root.
		{[]string{"cat", base + "/secret.txt"}, "", ""},
		{[]string{"cat", base + "/workspace/secret.txt"}, "", ""},
		{[]string{"cat", base + "/workspace/src/../secret.txt"}, "", ""},
		{[]string{"cat", "/etc/passwd"}, "", ""},
		{[]string{"head", "-c", "6", base + "/workspace/src/a.py"}, "", ""}, // another element's root
		// Symlinks out: the kernel refuses them beneath the root's fd.
		{[]string{"cat", "rel_out"}, "", ""},
		{[]string{"cat", "abs_out"}, "", ""},
		{[]string{"cat", "dir_out/secret.txt"}, "", ""},
		{[]string{"cat", "dir_out_abs/secret.txt"}, "", ""},
		{[]string{"cat", "proc_root"}, "", ""},
		{[]string{"cat", "proc_fd"}, "", ""},
		{[]string{"cat", "loop1"}, "", ""},
		{[]string{"ls", "a.py", "rel_out"}, "", ""},
		// never, as written and as resolved; kinds that are not files.
		{[]string{"cat", ".env"}, "", ""},
		{[]string{"cat", "env_link"}, "", ""},
		{[]string{"cat", "keys_link"}, "", ""},
		{[]string{"cat", "id.pem"}, "", ""},
		{[]string{"cat", "fifo"}, "", ""},
		{[]string{"cat", "devnode"}, "", ""},
		{[]string{"cat", "missing.py"}, "", ""},
		// Not a path element's shape.
		{[]string{"cat", "a.py", "a.py"}, "", ""},
		{[]string{"cat", ""}, "", ""},
		{[]string{"head", "-c", "6;id", base + "/workspace/tests/t.py"}, "", ""},
	} {
		res, body := h.call("cat", map[string]any{"argv": c.argv})
		if bytes.Contains(body, []byte(escapetest.Secret)) {
			t.Errorf("%q: ESCAPED: %s", c.argv, body)
		}
		if c.rule == "" {
			if res.Verdict != api.VerdictDeny || res.Reason != api.ReasonCommandNotAllowed {
				t.Errorf("%q: %s/%s, want deny/command_not_allowed: %s", c.argv, res.Verdict, res.Reason, body)
			}
			continue
		}
		if res.Verdict != api.VerdictAllow || !res.OK || res.Output == nil || !strings.Contains(*res.Output, c.want) {
			t.Errorf("%q: %s/%s, want allowed with %q: %s", c.argv, res.Verdict, res.Reason, c.want, body)
		}
	}
	// The record of the first call keeps the argument as the kernel
	// resolved it, by argument and root: what replay re-decides from.
	var found bool
	for _, line := range bytes.Split(h.ledger(), []byte("\n")) {
		var rec audit.Record
		if json.Unmarshal(line, &rec) != nil || rec.Kind != audit.KindDecision || rec.Verdict != api.VerdictAllow {
			continue
		}
		var rs []authz.Resource
		if json.Unmarshal(rec.Resolved, &rs) != nil || len(rs) != 1 {
			t.Fatalf("allowed record without its resolution: %s", line)
		}
		r := rs[0]
		if r.Arg != 1 || r.RootPath != "workspace/src" || r.Outcome != authz.OutcomeOK || r.Rel != "a.py" ||
			r.Path != filepath.Join(base, "workspace/src/a.py") {
			t.Fatalf("recorded resolution %+v", r)
		}
		found = true
		break
	}
	if !found {
		t.Fatal("no allowed decision in the ledger")
	}
}

// TestExecutePatternLoadErrors: a bad pattern or a failing example stops
// the load, naming the element or the example.
func TestExecutePatternLoadErrors(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	for _, c := range []struct{ commands, want string }{
		{`[["cat",{"path":["../x"]}]]`, "tools.x.commands[0][1]"},
		{`[["cat",{"rest":{"any":true}},"x"]]`, "tools.x.commands[0][1]"},
		{`[["cat",{"path":["workspace/src"]}]],"examples":{"match":[["cat","../secret.txt"]]}`, "tools.x.examples.match[0]"},
	} {
		m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{"x":{"operation":"execute","mounts":["workspace/src"],"pool":0,"commands":`+c.commands+`}}}`)
		if _, err := loadPolicy(m, securefs.ModeAuto, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.commands, err, c.want)
		}
	}
}
