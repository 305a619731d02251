package scaffold

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInstall: --install checks the manifest with sluiced, installs it
// where the service reads it (keeping the one there), writes the drop-in
// (the project writable, /home shown only as the project), reloads
// systemd and starts the socket or restarts a running service, and adds
// the agent to group sluice unless it is in it; a failing check stops it
// before anything changes.
func TestInstall(t *testing.T) {
	root := t.TempDir()
	manifest := filepath.Join(t.TempDir(), "proj.toml")
	if err := os.WriteFile(manifest, []byte("schema_version = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(root, "etc/sluice"), 0o750)
	os.WriteFile(filepath.Join(root, "etc/sluice/manifest.toml"), []byte("# the old one\n"), 0o640)
	var ran []string
	active := false
	inGroup := ""
	fake := func(name string, args ...string) ([]byte, error) {
		cmd := strings.Join(append([]string{filepath.Base(name)}, args...), " ")
		ran = append(ran, cmd)
		switch {
		case strings.HasPrefix(cmd, "systemctl is-active") && !active:
			return nil, errors.New("exit status 3")
		case strings.HasPrefix(cmd, "id -nG"):
			return []byte("alice " + inGroup + "\n"), nil
		}
		return nil, nil
	}
	var out bytes.Buffer
	in := &Install{Manifest: manifest, Dir: "/home/alice/proj", Format: TOML, Agent: "alice", AgentUID: 1000, Out: &out,
		Root: root, Run: fake, Systemd: true, Now: func() time.Time { return time.Date(2026, 12, 6, 3, 4, 5, 0, time.UTC) }}
	if err := in.Do(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(root, "etc/sluice/manifest.toml"))
	kept, _ := os.ReadFile(filepath.Join(root, "etc/sluice/manifest.toml.before-init-20261206T030405Z"))
	if string(got) != "schema_version = 1\n" || string(kept) != "# the old one\n" {
		t.Fatalf("installed %q, kept %q", got, kept)
	}
	if st, _ := os.Stat(filepath.Join(root, "etc/sluice/manifest.toml")); st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", st.Mode())
	}
	dropIn, _ := os.ReadFile(filepath.Join(root, DropIn))
	for _, want := range []string{"[Service]\n", "ExecStart=\n", "ExecStart=/usr/local/bin/sluiced --manifest /etc/sluice/manifest.toml",
		"ReadWritePaths=/home/alice/proj\n", "ProtectHome=tmpfs\n", "BindPaths=/home/alice/proj\n"} {
		if !strings.Contains(string(dropIn), want) {
			t.Errorf("drop-in lacks %q:\n%s", want, dropIn)
		}
	}
	want := []string{"sluiced --check --manifest " + manifest, "systemctl daemon-reload", "systemctl is-active --quiet sluiced.service",
		"systemctl enable --now sluiced.socket"}
	if len(ran) < len(want) || strings.Join(ran[:len(want)], "\n") != strings.Join(want, "\n") {
		t.Fatalf("ran:\n%s", strings.Join(ran, "\n"))
	}
	if last := ran[len(ran)-1]; last != "usermod -aG sluice alice" {
		t.Errorf("last command %q, want the usermod", last)
	}

	// Again, the service running and alice in the group: a restart, no usermod.
	ran, active, inGroup, out = nil, true, "sluice", bytes.Buffer{}
	in.Format, in.Dir = JSON, "/srv/proj"
	if err := in.Do(); err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(ran, "\n")
	if !strings.Contains(joined, "systemctl restart sluiced.service") || strings.Contains(joined, "usermod") {
		t.Fatalf("ran:\n%s", joined)
	}
	dropIn, _ = os.ReadFile(filepath.Join(root, DropIn))
	if strings.Contains(string(dropIn), "ExecStart") || strings.Contains(string(dropIn), "ProtectHome") || !strings.Contains(string(dropIn), "ReadWritePaths=/srv/proj\n") {
		t.Errorf("a JSON manifest outside /home needs neither ExecStart nor ProtectHome:\n%s", dropIn)
	}

	// A manifest sluiced refuses: nothing is installed.
	root2 := t.TempDir()
	in2 := &Install{Manifest: manifest, Dir: "/srv/proj", Format: TOML, Out: &out, Root: root2, Systemd: true,
		Run: func(name string, args ...string) ([]byte, error) {
			return []byte("manifest: tools: missing"), errors.New("exit status 1")
		}}
	if err := in2.Do(); err == nil || !strings.Contains(err.Error(), "tools: missing") {
		t.Fatalf("a refused manifest: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root2, "etc/sluice")); err == nil {
		t.Error("a refused manifest was installed")
	}
}
