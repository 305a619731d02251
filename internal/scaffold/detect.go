package scaffold

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

// Kind is a kind of project whose tests sluice init knows how to run.
type Kind string

const (
	Go     Kind = "go"
	Python Kind = "python"
	Node   Kind = "node"
)

// Project is what Detect found in a directory.
type Project struct {
	Kind Kind
	// Marker is the file or directory that told (go.mod, pyproject.toml,
	// tests/, package.json).
	Marker string
	// Pytest: the project names pytest (pytest.ini, conftest.py,
	// [tool.pytest…], a requirement); else unittest comes first.
	Pytest bool
}

// Detect looks at dir's top level only and returns the projects found, in
// the order Go, Python, Node. A package.json without a "test" script, or
// with npm's placeholder one, is not a Node project here (Skipped says
// why).
func Detect(dir string) (found []Project, skipped []string) {
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name))
		return err == nil
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || len(b) > 4<<20 {
			return nil
		}
		return b
	}
	if exists("go.mod") {
		found = append(found, Project{Kind: Go, Marker: "go.mod"})
	}
	if p, ok := detectPython(dir, exists, read); ok {
		found = append(found, p)
	}
	if exists("package.json") {
		var pkg struct {
			Scripts map[string]string `json:"scripts"`
		}
		switch err := json.Unmarshal(read("package.json"), &pkg); {
		case err != nil:
			skipped = append(skipped, "package.json does not parse as JSON, so no npm test tool was written")
		case strings.TrimSpace(pkg.Scripts["test"]) == "":
			skipped = append(skipped, `package.json has no "test" script, so no npm test tool was written`)
		case strings.Contains(pkg.Scripts["test"], "no test specified"):
			skipped = append(skipped, `package.json's "test" script is npm's placeholder ("no test specified"), so no npm test tool was written`)
		default:
			found = append(found, Project{Kind: Node, Marker: "package.json"})
		}
	}
	return found, skipped
}

func detectPython(dir string, exists func(string) bool, read func(string) []byte) (Project, bool) {
	p := Project{Kind: Python}
	for _, m := range []string{"pyproject.toml", "setup.py", "setup.cfg", "pytest.ini", "tox.ini", "conftest.py", "requirements.txt"} {
		if exists(m) {
			p.Marker = m
			break
		}
	}
	if p.Marker == "" {
		for _, d := range []string{"tests", "test"} {
			if m, _ := filepath.Glob(filepath.Join(dir, d, "*.py")); len(m) > 0 {
				p.Marker = d + "/"
				break
			}
		}
	}
	if p.Marker == "" {
		return p, false
	}
	p.Pytest = exists("pytest.ini") || exists("conftest.py") ||
		bytes.Contains(read("pyproject.toml"), []byte("pytest")) ||
		bytes.Contains(read("setup.cfg"), []byte("[tool:pytest]")) ||
		bytes.Contains(read("tox.ini"), []byte("[pytest]")) ||
		bytes.Contains(read("requirements.txt"), []byte("pytest")) ||
		bytes.Contains(read("requirements-dev.txt"), []byte("pytest")) ||
		bytes.Contains(read("setup.py"), []byte("pytest"))
	return p, true
}
