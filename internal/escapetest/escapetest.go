//go:build linux

package escapetest

import (
	"github.com/sluicehq/sluice/api"

	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Secret is planted in every file that no case may ever read. A response,
// an audit record or a log that contains it is a failed test.
const Secret = "SLUICE-SECRET-7f3a"

// MaxBytes is the read cap of the fixture's tools.
const MaxBytes = 4096

// Operations of a case.
const (
	Read = "read"
	List = "list"
)

// Case is one escape attempt (or one legitimate call that must work).
type Case struct {
	Name string
	Op   string     // Read or List
	Path string     // as a model sends it: relative to base
	Want api.Reason // reason code
	// Resolved, when set, is the path relative to base that the kernel
	// must have opened (checked against the result's resource).
	Resolved string
	// Truncated, when set, says the read must come back cut at MaxBytes.
	Truncated bool
	// Contains, when set, must be in the output.
	Contains string
}

// Cases is the table. Roots of both tools: workspace/src and
// workspace/tests; never: .env, *.pem, private/**.
var Cases = []Case{
	// Legitimate calls, including symlinks that stay beneath the root.
	{Name: "plain file", Op: Read, Path: "workspace/src/a.py", Want: "allowed", Resolved: "workspace/src/a.py", Contains: "hello"},
	{Name: "dot prefix", Op: Read, Path: "./workspace/src/a.py", Want: "allowed", Resolved: "workspace/src/a.py"},
	{Name: "double slash and dot", Op: Read, Path: "workspace//src/./a.py", Want: "allowed", Resolved: "workspace/src/a.py"},
	{Name: "subdir", Op: Read, Path: "workspace/src/sub/b.txt", Want: "allowed", Resolved: "workspace/src/sub/b.txt"},
	{Name: "dotdot inside root", Op: Read, Path: "workspace/src/sub/../a.py", Want: "allowed", Resolved: "workspace/src/a.py"},
	{Name: "dotdot deep inside root", Op: Read, Path: "workspace/src/sub/deep/../../a.py", Want: "allowed", Resolved: "workspace/src/a.py"},
	{Name: "second root", Op: Read, Path: "workspace/tests/t.py", Want: "allowed", Resolved: "workspace/tests/t.py"},
	{Name: "symlink inside root", Op: Read, Path: "workspace/src/in_link", Want: "allowed", Resolved: "workspace/src/a.py"},
	{Name: "dir symlink inside root", Op: Read, Path: "workspace/src/in_dir_link/b.txt", Want: "allowed", Resolved: "workspace/src/sub/b.txt"},
	{Name: "sparse 1 TiB file", Op: Read, Path: "workspace/src/sparse", Want: "allowed", Resolved: "workspace/src/sparse", Truncated: true},
	{Name: "long text cut on a rune", Op: Read, Path: "workspace/src/long.txt", Want: "allowed", Truncated: true},
	{Name: "list root", Op: List, Path: "workspace/src", Want: "allowed", Resolved: "workspace/src", Contains: `"a.py"`},
	{Name: "list root dot", Op: List, Path: "workspace/src/.", Want: "allowed", Resolved: "workspace/src"},
	{Name: "list subdir", Op: List, Path: "workspace/src/sub", Want: "allowed", Resolved: "workspace/src/sub"},

	// Traversal.
	{Name: "dotdot out of root", Op: Read, Path: "workspace/src/../secret.txt", Want: "outside_roots"},
	{Name: "dotdot out of base", Op: Read, Path: "workspace/src/../../secret.txt", Want: "outside_roots"},
	{Name: "sub dotdot out", Op: Read, Path: "workspace/src/sub/../../secret.txt", Want: "outside_roots"},
	{Name: "missing dirs climbing out", Op: Read, Path: "workspace/src/a/b/../../../x", Want: "outside_roots"},
	{Name: "root itself dotdot", Op: Read, Path: "workspace/src/..", Want: "outside_roots"},
	{Name: "other root climbing across", Op: Read, Path: "workspace/tests/../src/a.py", Want: "outside_roots"},
	{Name: "list parent of roots", Op: List, Path: "workspace", Want: "outside_roots"},
	{Name: "base itself", Op: List, Path: ".", Want: "outside_roots"},
	{Name: "prefix collision", Op: Read, Path: "workspace/src_evil/x", Want: "outside_roots"},
	{Name: "prefix collision climbing back", Op: Read, Path: "workspace/src_evil/../src/a.py", Want: "outside_roots"},
	{Name: "relative to root only", Op: Read, Path: "a.py", Want: "outside_roots"},
	{Name: "backslashes", Op: Read, Path: `workspace\src\a.py`, Want: "outside_roots"},

	// Lexically invalid.
	{Name: "absolute outside", Op: Read, Path: "/etc/passwd", Want: "invalid_path"},
	{Name: "absolute inside", Op: Read, Path: "{{BASE}}/workspace/src/a.py", Want: "invalid_path"},
	{Name: "empty", Op: Read, Path: "", Want: "invalid_path"},
	{Name: "NUL byte", Op: Read, Path: "workspace/src/a.py\x00.txt", Want: "invalid_path"},
	{Name: "5000 chars", Op: Read, Path: "workspace/src/" + strings.Repeat("a", 5000), Want: "invalid_path"},
	{Name: "component over NAME_MAX", Op: Read, Path: "workspace/src/" + strings.Repeat("b", 300), Want: "invalid_path"},

	// Symlinks that leave the root.
	{Name: "absolute symlink out", Op: Read, Path: "workspace/src/abs_out", Want: "outside_roots"},
	{Name: "relative symlink climbing out", Op: Read, Path: "workspace/src/rel_out", Want: "outside_roots"},
	{Name: "dir symlink out then file", Op: Read, Path: "workspace/src/dir_out/secret.txt", Want: "outside_roots"},
	{Name: "absolute dir symlink then file", Op: Read, Path: "workspace/src/dir_out_abs/secret.txt", Want: "outside_roots"},
	{Name: "symlink out and back in", Op: Read, Path: "workspace/src/climb_back", Want: "outside_roots"},
	{Name: "list through dir symlink out", Op: List, Path: "workspace/src/dir_out", Want: "outside_roots"},
	{Name: "proc self root", Op: Read, Path: "workspace/src/proc_root", Want: "outside_roots"},
	{Name: "proc self fd", Op: Read, Path: "workspace/src/proc_fd", Want: "outside_roots"},
	{Name: "proc self cwd dir", Op: Read, Path: "workspace/src/proc_cwd/secret.txt", Want: "outside_roots"},
	{Name: "dev zero by symlink", Op: Read, Path: "workspace/src/devzero", Want: "outside_roots"},
	{Name: "symlink loop", Op: Read, Path: "workspace/src/loop1", Want: "outside_roots"},
	{Name: "self loop", Op: Read, Path: "workspace/src/self_loop", Want: "outside_roots"},

	// never.
	{Name: "dotenv", Op: Read, Path: "workspace/src/.env", Want: "never_listed"},
	{Name: "dotenv dot", Op: Read, Path: "./workspace/src/./.env", Want: "never_listed"},
	{Name: "dotenv via sub", Op: Read, Path: "workspace/src/sub/../.env", Want: "never_listed"},
	{Name: "dotenv via missing sub", Op: Read, Path: "workspace/src/nosuch/../.env", Want: "never_listed"},
	{Name: "pem", Op: Read, Path: "workspace/src/id.pem", Want: "never_listed"},
	{Name: "private dir file", Op: Read, Path: "workspace/src/private/keys.txt", Want: "never_listed"},
	{Name: "list private dir", Op: List, Path: "workspace/src/private", Want: "never_listed"},
	{Name: "symlink to dotenv", Op: Read, Path: "workspace/src/env_link", Want: "never_listed"},
	{Name: "symlink to private", Op: Read, Path: "workspace/src/keys_link", Want: "never_listed"},
	{Name: "nested dotenv", Op: Read, Path: "workspace/src/sub/.env", Want: "never_listed"},
	// A hard link to .env under an innocent name: its other names cannot
	// be checked, so a tool with never globs refuses a regular file with
	// more than one link (docs/security.md, "The third review").
	{Name: "hard link to dotenv", Op: Read, Path: "workspace/src/innocent.txt", Want: "unsupported_file_type"},
	{Name: "symlink to a hard link", Op: Read, Path: "workspace/src/innocent_link", Want: "unsupported_file_type"},

	// Missing: an oracle only inside the roots.
	{Name: "missing inside", Op: Read, Path: "workspace/src/missing.txt", Want: "not_found"},
	{Name: "missing deep inside", Op: Read, Path: "workspace/src/sub/nope/x", Want: "not_found"},
	{Name: "file as dir", Op: Read, Path: "workspace/src/a.py/x", Want: "not_found"},
	{Name: "percent-encoded dotdot is a name", Op: Read, Path: "workspace/src/%2e%2e/secret.txt", Want: "not_found"},
	{Name: "missing outside roots", Op: Read, Path: "workspace/missing.txt", Want: "outside_roots"},
	{Name: "missing via dotdot", Op: Read, Path: "workspace/src/../missing.txt", Want: "outside_roots"},
	{Name: "missing outside base", Op: Read, Path: "nosuchdir/x", Want: "outside_roots"},

	// File types.
	{Name: "fifo", Op: Read, Path: "workspace/src/fifo", Want: "unsupported_file_type"},
	{Name: "fifo by symlink", Op: Read, Path: "workspace/src/fifo_link", Want: "unsupported_file_type"},
	{Name: "unix socket", Op: Read, Path: "workspace/src/sock", Want: "unsupported_file_type"},
	{Name: "device node", Op: Read, Path: "workspace/src/devnode", Want: "unsupported_file_type"},
	{Name: "read a directory", Op: Read, Path: "workspace/src/sub", Want: "not_a_file"},
	{Name: "list a file", Op: List, Path: "workspace/src/a.py", Want: "not_a_directory"},
	{Name: "list a fifo", Op: List, Path: "workspace/src/fifo", Want: "not_a_directory"},
}

// Fixture is a built workspace.
type Fixture struct {
	Base     string // the manifest's base: holds manifest.json and workspace/
	Manifest string // path of the manifest file
	// Sock is a listening unix socket planted inside the root; keep it
	// open for the fixture's life.
	Sock net.Listener
}

// ManifestJSON is the fixture's manifest.
const ManifestJSON = `{
  "schema_version": 1,
  "tools": {
    "read_file": {"operation": "read", "roots": ["workspace/src", "workspace/tests"],
                  "never": [".env", "*.pem", "private/**"], "max_bytes": 4096},
    "list_dir":  {"operation": "list", "roots": ["workspace/src", "workspace/tests"],
                  "never": [".env", "*.pem", "private/**"], "max_bytes": 4096}
  }
}`

// ToolFor returns the fixture tool for an operation.
func ToolFor(op string) string {
	if op == List {
		return "list_dir"
	}
	return "read_file"
}

// Build makes the fixture in a fresh temp dir. It needs root for the
// device node (CI runs as root; a non-root run fails loudly).
func Build(t testing.TB) *Fixture {
	t.Helper()
	base := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("escapetest fixture: %v", err)
		}
	}
	secret := func(p string) { must(os.WriteFile(filepath.Join(base, p), []byte(Secret+" "+p+"\n"), 0o644)) }
	file := func(p, s string) { must(os.WriteFile(filepath.Join(base, p), []byte(s), 0o644)) }
	dir := func(p string) { must(os.MkdirAll(filepath.Join(base, p), 0o755)) }
	link := func(target, p string) { must(os.Symlink(target, filepath.Join(base, p))) }

	dir("workspace/src/sub/deep")
	dir("workspace/src/private")
	dir("workspace/tests")
	dir("workspace/src_evil")
	secret("secret.txt")
	secret("workspace/secret.txt")
	secret("workspace/src_evil/x")
	secret("workspace/src/.env")
	secret("workspace/src/sub/.env")
	secret("workspace/src/id.pem")
	secret("workspace/src/private/keys.txt")
	file("workspace/src/a.py", "print('hello')\n")
	file("workspace/src/sub/b.txt", "b\n")
	file("workspace/src/sub/deep/c.txt", "c\n")
	file("workspace/tests/t.py", "import unittest\n")
	// A text whose cap falls inside a 3-byte rune.
	file("workspace/src/long.txt", strings.Repeat("x", MaxBytes-1)+strings.Repeat("€", 10))
	f, err := os.Create(filepath.Join(base, "workspace/src/sparse"))
	must(err)
	must(f.Truncate(1 << 40))
	must(f.Close())

	link("a.py", "workspace/src/in_link")
	link("sub", "workspace/src/in_dir_link")
	link(filepath.Join(base, "secret.txt"), "workspace/src/abs_out")
	link("../../secret.txt", "workspace/src/rel_out")
	link("../..", "workspace/src/dir_out")
	link(base, "workspace/src/dir_out_abs")
	link("../src/a.py", "workspace/src/climb_back")
	link("/proc/self/root"+filepath.Join(base, "secret.txt"), "workspace/src/proc_root")
	link("/proc/self/fd/0", "workspace/src/proc_fd")
	link("/proc/self/cwd", "workspace/src/proc_cwd")
	link("/dev/zero", "workspace/src/devzero")
	link("loop2", "workspace/src/loop1")
	link("loop1", "workspace/src/loop2")
	link("self_loop", "workspace/src/self_loop")
	link(".env", "workspace/src/env_link")
	link("private/keys.txt", "workspace/src/keys_link")
	must(unix.Mkfifo(filepath.Join(base, "workspace/src/fifo"), 0o644))
	link("fifo", "workspace/src/fifo_link")
	must(os.Link(filepath.Join(base, "workspace/src/.env"), filepath.Join(base, "workspace/src/innocent.txt")))
	link("innocent.txt", "workspace/src/innocent_link")
	if err := unix.Mknod(filepath.Join(base, "workspace/src/devnode"), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 5))); err != nil {
		t.Fatalf("escapetest fixture: mknod needs root (CI runs as root): %v", err)
	}
	ln, err := net.Listen("unix", filepath.Join(base, "workspace/src/sock"))
	must(err)
	t.Cleanup(func() { ln.Close() })
	mpath := filepath.Join(base, "manifest.json")
	file("manifest.json", ManifestJSON)
	return &Fixture{Base: base, Manifest: mpath, Sock: ln}
}

// PathFor substitutes the fixture's base into a case's path.
func (f *Fixture) PathFor(c Case) string {
	return strings.ReplaceAll(c.Path, "{{BASE}}", f.Base)
}

// CheckResolved checks a result's resource against the case.
func (f *Fixture) CheckResolved(c Case, resource string) error {
	if c.Resolved == "" {
		return nil
	}
	want := filepath.Join(f.Base, c.Resolved)
	if resource != want {
		return fmt.Errorf("resource %q, want %q", resource, want)
	}
	return nil
}
