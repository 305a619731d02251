package scaffold

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Install is what `sluice init --install` does after writing a manifest:
// the steps NextSteps prints, done (docs/manifest.md, "Starting a
// manifest: sluice init"). Every step says what it did on Out; the first
// that fails stops it, and nothing it replaced is lost (an existing
// service manifest is kept beside the new one).
type Install struct {
	Manifest string // the manifest init wrote, absolute
	Dir      string // the project
	Format   Format
	Agent    string // the agent's user name; "" for a uid without one
	AgentUID uint32
	Out      io.Writer
	// Root is put before every host path Install writes; "" is the host
	// itself (tests give a directory).
	Root string
	// Run runs a command and returns its combined output; nil runs it.
	Run func(name string, args ...string) ([]byte, error)
	// Systemd says systemd runs this host (/run/systemd/system exists).
	Systemd bool
	// Now names the backup of a replaced manifest; nil is time.Now.
	Now func() time.Time
}

// socketGroup is the group of the service's socket (scripts/sluiced.socket).
const socketGroup = "sluice"

// DropIn is the drop-in Install writes for the service.
const DropIn = "/etc/systemd/system/sluiced.service.d/50-sluice-init.conf"

// ServiceManifest is where the service reads a manifest of format f:
// scripts/sluiced.service names the JSON one; the drop-in points a TOML
// one out.
func ServiceManifest(f Format) string { return "/etc/sluice/manifest" + f.Ext() }

// Do runs the steps.
func (in *Install) Do() error {
	run := in.Run
	if run == nil {
		run = func(name string, args ...string) ([]byte, error) {
			return exec.Command(name, args...).CombinedOutput()
		}
	}
	say := func(format string, a ...any) { fmt.Fprintf(in.Out, "  "+format+"\n", a...) }

	// 1. As sluiced will load it.
	sluiced := "/usr/local/bin/sluiced"
	if _, err := os.Stat(in.Root + sluiced); err != nil {
		sluiced = "sluiced"
	}
	if out, err := run(sluiced, "--check", "--manifest", in.Manifest); err != nil {
		return fmt.Errorf("%s --check --manifest %s: %v\n%s", sluiced, in.Manifest, err, bytes.TrimSpace(out))
	}
	say("checked: sluiced --check --manifest %s", in.Manifest)

	// 2. Where the service reads it, the one there kept.
	target := ServiceManifest(in.Format)
	data, err := os.ReadFile(in.Manifest)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(in.Root+filepath.Dir(target), 0o750); err != nil {
		return err
	}
	if old, err := os.ReadFile(in.Root + target); err == nil && !bytes.Equal(old, data) {
		now := time.Now
		if in.Now != nil {
			now = in.Now
		}
		backup := target + ".before-init-" + now().UTC().Format("20060102T150405Z")
		if err := WriteFile(in.Root+backup, old, false); err != nil {
			return fmt.Errorf("keep the service's manifest as %s: %w", backup, err)
		}
		say("kept the service's manifest as it was: %s", backup)
	}
	if err := WriteFile(in.Root+target, data, true); err != nil {
		return fmt.Errorf("install %s: %w", target, err)
	}
	gid := -1
	if g, err := user.LookupGroup(socketGroup); err == nil {
		gid, _ = strconv.Atoi(g.Gid)
	}
	if err := os.Chmod(in.Root+target, 0o640); err != nil {
		return err
	}
	if gid >= 0 && in.Root == "" {
		if err := os.Chown(target, 0, gid); err != nil {
			return err
		}
	}
	say("installed: %s (0640)", target)

	// 3. The service's view of the project.
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by sluice init --install for %s: the service reads %s\n", in.Dir, target)
	b.WriteString("# and may see and change the project (docs/operating.md, \"Install as a service\").\n[Service]\n")
	if in.Format != JSON {
		b.WriteString("ExecStart=\nExecStart=" + serviceExec + "\n")
	}
	b.WriteString("ReadWritePaths=" + in.Dir + "\n")
	if underHome(in.Dir) {
		b.WriteString("# The unit hides /home and /root; these show the project alone.\nProtectHome=tmpfs\nBindPaths=" + in.Dir + "\n")
	}
	if err := os.MkdirAll(in.Root+filepath.Dir(DropIn), 0o755); err != nil {
		return err
	}
	if err := WriteFile(in.Root+DropIn, []byte(b.String()), true); err != nil {
		return fmt.Errorf("write %s: %w", DropIn, err)
	}
	say("wrote %s (the project writable for the service)", DropIn)

	// 4. The service, with it.
	if in.Systemd {
		if out, err := run("systemctl", "daemon-reload"); err != nil {
			return fmt.Errorf("systemctl daemon-reload: %v\n%s", err, bytes.TrimSpace(out))
		}
		if _, err := run("systemctl", "is-active", "--quiet", "sluiced.service"); err == nil {
			if out, err := run("systemctl", "restart", "sluiced.service"); err != nil {
				return fmt.Errorf("systemctl restart sluiced.service: %v\n%s (journalctl -u sluiced says why)", err, bytes.TrimSpace(out))
			}
			say("restarted sluiced.service with it")
		} else {
			if out, err := run("systemctl", "enable", "--now", "sluiced.socket"); err != nil {
				return fmt.Errorf("systemctl enable --now sluiced.socket: %v\n%s (did make install run?)", err, bytes.TrimSpace(out))
			}
			say("sluiced.socket listening: the service starts with it on the first call")
		}
	} else {
		say("no systemd here: start it by hand, e.g. sluiced --manifest %s", target)
	}

	// 5. The agent's way to the socket.
	if in.AgentUID == 0 {
		return nil
	}
	if in.Agent == "" {
		say("uid %d has no user name: give it group %s yourself (the socket is 0660, group %s)", in.AgentUID, socketGroup, socketGroup)
		return nil
	}
	if gid < 0 {
		if out, err := run("groupadd", "--system", socketGroup); err != nil {
			return fmt.Errorf("groupadd --system %s: %v\n%s", socketGroup, err, bytes.TrimSpace(out))
		}
		say("made group %s (scripts/install.sh makes it; this host had none)", socketGroup)
	}
	out, err := run("id", "-nG", in.Agent)
	if err == nil && containsWord(string(out), socketGroup) {
		say("%s is in group %s already", in.Agent, socketGroup)
		return nil
	}
	if out, err := run("usermod", "-aG", socketGroup, in.Agent); err != nil {
		return fmt.Errorf("usermod -aG %s %s: %v\n%s", socketGroup, in.Agent, err, bytes.TrimSpace(out))
	}
	say("added %s to group %s (the socket is 0660, group %s): it applies to %s's next login", in.Agent, socketGroup, socketGroup, in.Agent)
	return nil
}

func underHome(dir string) bool {
	return dir == "/home" || strings.HasPrefix(dir, "/home/") || dir == "/root" || strings.HasPrefix(dir, "/root/")
}

func containsWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// ErrNotRoot is --install's refusal for a user other than root.
var ErrNotRoot = errors.New("--install changes the host's service (its manifest, a systemd drop-in, the socket group): run it as root (sudo)")

// InstalledNext is what to run after Install: the client, as the agent.
func InstalledNext(n Next) string {
	var b strings.Builder
	b.WriteString("Next, ")
	if n.AgentIsRoot {
		b.WriteString("in the project:\n")
	} else {
		fmt.Fprintf(&b, "as %s in a new login (su - %s), so that group %s applies, in the project:\n", n.Agent, n.Agent, socketGroup)
	}
	b.WriteString("       sluice client setup claude|codex|gemini|cursor|vscode\n")
	b.WriteString("       sluice client check\n")
	b.WriteString("Paths in calls are relative to the project (base): read_file {\"path\": \"README.md\"}.\n")
	fmt.Fprintf(&b, "The service reads %s: edit that one, then sudo systemctl reload sluiced\n", ServiceManifest(n.Format))
	b.WriteString("(an invalid manifest is refused and the one in force stays; journalctl -u sluiced says why).\n")
	return b.String()
}
