//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// The rivals: the sandboxes users pick instead, run on the view rows' cat,
// find and git status (--rivals DIR). Both come from the npm registry and
// are installed under DIR on first use, at pinned versions (the ones the
// Performance issue measured).
const (
	codexPkg = "@openai/codex@0.169.0"                // codex sandbox: its native binary ships in the package
	srtPkg   = "@anthropic-ai/sandbox-runtime@0.0.83" // srt: bwrap plus proxies on Linux
)

// rivalTools are the tools the rivals run.
var rivalTools = map[string]bool{"v_cat": true, "v_find": true, "v_git": true}

func rivalSides(dir, base string, tools map[string]vtool) []side {
	dir, err := filepath.Abs(dir)
	check(err)
	bin := filepath.Join(dir, "node_modules", ".bin")
	if _, err := os.Stat(filepath.Join(bin, "srt")); err != nil {
		fmt.Printf("\nrivals: installing %s and %s under %s\n", codexPkg, srtPkg, dir)
		check(os.MkdirAll(dir, 0o755))
		runOut("npm", []string{"install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel", "error", codexPkg, srtPkg}, nil, "")
	}
	has := func(tool string) bool { return rivalTools[tool] }
	// codex sandbox runs argv read-only (its default policy), no network.
	codexHome := filepath.Join(dir, "codex-home")
	check(os.MkdirAll(codexHome, 0o700))
	codex := filepath.Join(bin, "codex")
	sides := []side{{name: "codex", has: has, run: func(tool string) string {
		t := tools[tool]
		env := append(t.environ(), "CODEX_HOME="+codexHome)
		return runOut(codex, append([]string{"sandbox", "--"}, t.argv...), env, filepath.Join(base, t.cwd))
	}}}
	fmt.Printf("\nrivals: %s\n", runOut(codex, []string{"--version"}, nil, ""))
	// srt on Linux needs ripgrep and socat besides bwrap: Debian packages,
	// not installed here (the rivals come from npm only).
	_, rgErr := exec.LookPath("rg")
	_, socatErr := exec.LookPath("socat")
	if rgErr != nil || socatErr != nil {
		fmt.Printf("rivals: no srt column: it needs ripgrep and socat on PATH (apt-get install ripgrep socat)\n")
		return sides
	}
	settings := filepath.Join(dir, "srt-settings.json")
	check(os.WriteFile(settings, []byte(`{"network":{"allowedDomains":[],"deniedDomains":[]},`+
		`"filesystem":{"denyRead":[],"allowWrite":[],"denyWrite":[]}}`), 0o644))
	srt := filepath.Join(bin, "srt")
	fmt.Printf("rivals: srt %s", runOut(srt, []string{"--version"}, nil, ""))
	return append(sides, side{name: "srt", has: has, run: func(tool string) string {
		t := tools[tool]
		// srt needs node on PATH for itself; the command gets the same
		// environment through it.
		env := t.environ()
		if _, ok := t.env["HOME"]; !ok {
			env = append(env, "HOME="+dir)
		}
		env[0] = "PATH=" + filepath.Dir(nodePath()) + ":" + env[0][len("PATH="):]
		return runOut(srt, append([]string{"-s", settings, "--"}, t.argv...), env, filepath.Join(base, t.cwd))
	}})
}

func nodePath() string {
	p, err := exec.LookPath("node")
	check(err)
	return p
}
