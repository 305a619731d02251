//go:build linux

package daemon

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// ciNode is a loopback node that looks names up as a case-insensitive
// file system does (NTFS, exFAT, SMB, ext4 casefold): an exact name
// first, else the entry equal to it under simple case folding with
// trailing dots and spaces ignored. It is written with strings.EqualFold,
// not with internal/foldname, so that the test does not grade the code
// with its own answer. The kernel keeps the name it asked for (".ENV") in
// its dentries, so every operation that goes by path resolves the path's
// components again here.
type ciNode struct{ fs.LoopbackNode }

func ciEqual(a, b string) bool {
	return strings.EqualFold(strings.TrimRight(a, ". "), strings.TrimRight(b, ". "))
}

// realName returns the on-disk name in dir that name opens, or name.
func realName(dir, name string) string {
	if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
		return name
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if ciEqual(e.Name(), name) {
			return e.Name()
		}
	}
	return name
}

// realPath is the node's path on the backing file system.
func (n *ciNode) realPath() string {
	p := n.RootData.Path
	if rel := n.Path(nil); rel != "" {
		for _, c := range strings.Split(rel, "/") {
			p = filepath.Join(p, realName(p, c))
		}
	}
	return p
}

func (n *ciNode) child(name string) string {
	dir := n.realPath()
	return filepath.Join(dir, realName(dir, name))
}

func (n *ciNode) newChild(ctx context.Context, name string, st *syscall.Stat_t) *fs.Inode {
	node := n.RootData.NewNode(n.RootData, n.EmbeddedInode(), name, st)
	return n.NewInode(ctx, node, fs.StableAttr{Mode: st.Mode, Ino: st.Ino})
}

func (n *ciNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var st syscall.Stat_t
	if err := syscall.Lstat(n.child(name), &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	out.Attr.FromStat(&st)
	return n.newChild(ctx, name, &st), 0
}

func (n *ciNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if fga, ok := f.(fs.FileGetattrer); ok {
		return fga.Getattr(ctx, out)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(n.realPath(), &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

func (n *ciNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fd, err := syscall.Open(n.realPath(), int(flags&^(syscall.O_APPEND|fuse.FMODE_EXEC))|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	return fs.NewLoopbackFile(fd), 0, 0
}

func (n *ciNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ds, errno := fs.NewLoopbackDirStream(n.realPath())
	if errno != 0 {
		return nil, 0, errno
	}
	return ds, 0, 0
}

func (n *ciNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	return fs.NewLoopbackDirStream(n.realPath())
}

func (n *ciNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	fd, err := syscall.Open(n.child(name), int(flags&^syscall.O_APPEND)|syscall.O_CREAT, mode)
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, nil, 0, fs.ToErrno(err)
	}
	out.FromStat(&st)
	return n.newChild(ctx, name, &st), fs.NewLoopbackFile(fd), 0, 0
}

func (n *ciNode) Unlink(ctx context.Context, name string) syscall.Errno {
	return fs.ToErrno(syscall.Unlink(n.child(name)))
}

func (n *ciNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	p, ok := newParent.(*ciNode)
	if !ok {
		return syscall.EXDEV
	}
	return fs.ToErrno(unix.Renameat2(unix.AT_FDCWD, n.child(name), unix.AT_FDCWD, p.child(newName), uint(flags)))
}

// mountCaseInsensitive mounts backing at mnt through ciNode until the test
// ends.
func mountCaseInsensitive(t *testing.T, backing, mnt string) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		t.Fatal(err)
	}
	root := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &ciNode{fs.LoopbackNode{RootData: r}}
	}
	root.RootNode = root.NewNode(root, nil, "", &st)
	srv, err := fs.Mount(mnt, root.RootNode, &fs.Options{MountOptions: fuse.MountOptions{
		AllowOther: true, DirectMount: true, DirectMountStrict: true, FsName: "sluice-casefold-test", Name: "cifs", DisableXAttrs: true}})
	if err != nil {
		t.Fatalf("mount the case-insensitive loopback: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
		srv.Wait()
	})
}

const casefoldNever = `"never":[".env","*.pem","private/**"]`

// casefoldFixture: workspace/src is a case-insensitive file system over
// backing/src, which holds .env, id.pem and private/key (secrets) and
// main.py; a read, list, write, delete and execute tool on it.
func casefoldFixture(t *testing.T) (base, backing string, h *harness) {
	t.Helper()
	testutil.RequireRoot(t)
	base = t.TempDir()
	testutil.Must(t, os.Chmod(base, 0o755))
	backing = filepath.Join(base, "backing/src")
	for _, d := range []string{backing + "/private", base + "/workspace/src"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{".env", "id.pem", "private/key"} {
		testutil.Must(t, os.WriteFile(filepath.Join(backing, f), []byte(escapetest.Secret+" "+f+"\n"), 0o644))
	}
	testutil.Must(t, os.WriteFile(filepath.Join(backing, "main.py"), []byte("print('hello')\n"), 0o644))
	mountCaseInsensitive(t, backing, filepath.Join(base, "workspace/src"))
	if b, err := os.ReadFile(filepath.Join(base, "workspace/src/.ENV")); err != nil || !bytes.Contains(b, []byte(escapetest.Secret)) {
		t.Fatalf("the loopback is not case-insensitive: %q, %v", b, err)
	}
	m := writeManifest(t, base, `{"schema_version":1,"tools":{
	  "read_file":{"operation":"read","roots":["workspace/src"],`+casefoldNever+`},
	  "list_dir":{"operation":"list","roots":["workspace/src"],`+casefoldNever+`},
	  "write_file":{"operation":"write","roots":["workspace/src"],`+casefoldNever+`},
	  "delete_file":{"operation":"delete","roots":["workspace/src"],`+casefoldNever+`},
	  "cat_secrets":{"operation":"execute","commands":[["sh","-c","cat .ENV ID.PEM Id.Pem .env. PRIVATE/key; ls -a; echo done"]],
	    "mounts":["workspace/src"],"cwd":"workspace/src","pool":0,`+casefoldNever+`}}}`)
	runDir := checkedRunDir(t) // registered before the daemon, so checked after it stopped
	return base, backing, start(t, m, securefs.ModeAuto, func(c *Config) { c.RunDir = runDir })
}

// TestNeverCaseInsensitive: on a case-insensitive file system, no spelling
// of a never-listed name reads, writes, deletes, lists or is seen by a
// command; the secrets stay out of every response and the ledger.
func TestNeverCaseInsensitive(t *testing.T) {
	_, backing, h := casefoldFixture(t)
	secrets := map[string][]byte{}
	for _, f := range []string{".env", "id.pem", "private/key"} {
		secrets[f], _ = os.ReadFile(filepath.Join(backing, f))
	}
	noSecret := func(what string, body []byte) {
		t.Helper()
		if bytes.Contains(body, []byte(escapetest.Secret)) {
			t.Errorf("%s: the secret is in the response: %s", what, body)
		}
	}
	for _, p := range []string{"workspace/src/.ENV", "workspace/src/.Env", "workspace/src/ID.PEM", "workspace/src/Id.Pem",
		"workspace/src/.env.", "workspace/src/.env ", "workspace/src/.env. ", "workspace/src/PRIVATE/key", "workspace/src/Private./key"} {
		res, body := h.call("read_file", map[string]any{"path": p})
		if res.Verdict != "deny" || res.Reason != "never_listed" {
			t.Errorf("read_file %q: %s/%s, want deny/never_listed", p, res.Verdict, res.Reason)
		}
		noSecret("read_file "+p, body)
	}
	if res, body := h.call("read_file", map[string]any{"path": "workspace/src/MAIN.PY"}); res.Verdict != "allow" || !strings.Contains(*res.Output, "hello") {
		t.Errorf("read_file MAIN.PY: %s/%s, want allow and the file: %s", res.Verdict, res.Reason, body)
	}
	res, body := h.call("write_file", map[string]any{"path": "workspace/src/.ENV", "content": "pwned\n"})
	if res.Verdict != "deny" || res.Reason != "never_listed" {
		t.Errorf("write_file .ENV: %s/%s, want deny/never_listed: %s", res.Verdict, res.Reason, body)
	}
	res, body = h.call("delete_file", map[string]any{"path": "workspace/src/Id.Pem"})
	if res.Verdict != "deny" || res.Reason != "never_listed" {
		t.Errorf("delete_file Id.Pem: %s/%s, want deny/never_listed: %s", res.Verdict, res.Reason, body)
	}
	// Another write's temp name, spelled in capitals, is not a target.
	tmp := filepath.Join(backing, fileop.TempPrefix+"deadbeef")
	testutil.Must(t, os.WriteFile(tmp, []byte("in flight\n"), 0o600))
	res, body = h.call("write_file", map[string]any{"path": "workspace/src/" + strings.ToUpper(fileop.TempPrefix) + "deadbeef", "content": "x\n"})
	if res.Verdict != "deny" || res.Reason != "invalid_path" {
		t.Errorf("write_file over a temp name in capitals: %s/%s, want deny/invalid_path: %s", res.Verdict, res.Reason, body)
	}
	if b, _ := os.ReadFile(tmp); string(b) != "in flight\n" {
		t.Errorf("the temp file was overwritten: %q", b)
	}
	for f, want := range secrets {
		if got, err := os.ReadFile(filepath.Join(backing, f)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s changed on disk: %q, %v", f, got, err)
		}
	}
	for _, p := range []string{"workspace/src", "workspace/SRC/../src"} {
		res, body = h.call("list_dir", map[string]any{"path": p})
		if p == "workspace/src" && (res.Verdict != "allow" || res.Output == nil || !strings.Contains(*res.Output, `"main.py"`)) {
			t.Errorf("list_dir %q: %s/%s, want allow with main.py: %s", p, res.Verdict, res.Reason, body)
		}
		if bytes.Contains(body, []byte(`.env`)) || bytes.Contains(body, []byte(`id.pem`)) || bytes.Contains(body, []byte(`private`)) {
			t.Errorf("list_dir %q shows a hidden name: %s", p, body)
		}
	}
	res, body = h.call("cat_secrets", map[string]any{})
	if res.Verdict != "allow" || res.Output == nil || !strings.Contains(*res.Output, "done") {
		t.Errorf("cat_secrets: %s/%s, want allow and done: %s", res.Verdict, res.Reason, body)
	}
	noSecret("cat_secrets", body)
	if res.Output != nil && (strings.Contains(*res.Output, ".env") || strings.Contains(*res.Output, "id.pem")) {
		t.Errorf("cat_secrets: ls shows a hidden name: %q", *res.Output)
	}
	if bytes.Contains(h.ledger(), []byte(escapetest.Secret)) {
		t.Error("the secret is in the ledger")
	}
}

// TestReview4NeverDoubleStar: never ["**"] hides everything beneath the
// roots, for the file tools and inside an execute tool's view. It hid
// nothing: "**" alone compiled to a component that matches no name.
// docs/security.md, "The fourth review"
func TestReview4NeverDoubleStar(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	testutil.Must(t, os.Chmod(base, 0o755))
	src := filepath.Join(base, "workspace/src")
	testutil.Must(t, os.MkdirAll(filepath.Join(src, "sub"), 0o755))
	for _, f := range []string{"secret.txt", "sub/key"} {
		testutil.Must(t, os.WriteFile(filepath.Join(src, f), []byte(escapetest.Secret+" "+f+"\n"), 0o644))
	}
	never := `"never":["**"]`
	m := writeManifest(t, base, `{"schema_version":1,"tools":{
	  "read_file":{"operation":"read","roots":["workspace/src"],`+never+`},
	  "list_dir":{"operation":"list","roots":["workspace/src"],`+never+`},
	  "write_file":{"operation":"write","roots":["workspace/src"],`+never+`},
	  "cat_all":{"operation":"execute","commands":[["sh","-c","cat secret.txt sub/key; ls -a; echo done"]],
	    "mounts":["workspace/src"],"cwd":"workspace/src","pool":0,`+never+`}}}`)
	h := start(t, m, securefs.ModeAuto)
	for _, p := range []string{"workspace/src/secret.txt", "workspace/src/sub/key"} {
		res, body := h.call("read_file", map[string]any{"path": p})
		if res.Verdict != "deny" || res.Reason != "never_listed" {
			t.Errorf("read_file %q: %s/%s, want deny/never_listed", p, res.Verdict, res.Reason)
		}
		if bytes.Contains(body, []byte(escapetest.Secret)) {
			t.Errorf("read_file %q: the secret is in the response: %s", p, body)
		}
	}
	res, body := h.call("write_file", map[string]any{"path": "workspace/src/secret.txt", "content": "pwned\n"})
	if res.Verdict != "deny" || res.Reason != "never_listed" {
		t.Errorf("write_file: %s/%s, want deny/never_listed: %s", res.Verdict, res.Reason, body)
	}
	res, body = h.call("list_dir", map[string]any{"path": "workspace/src"})
	if bytes.Contains(body, []byte("secret.txt")) || bytes.Contains(body, []byte(`"sub"`)) {
		t.Errorf("list_dir shows a hidden name: %s", body)
	}
	res, body = h.call("cat_all", map[string]any{})
	if res.Verdict != "allow" || res.Output == nil || !strings.Contains(*res.Output, "done") {
		t.Fatalf("cat_all: %s/%s, want allow and done: %s", res.Verdict, res.Reason, body)
	}
	if bytes.Contains(body, []byte(escapetest.Secret)) || strings.Contains(*res.Output, "secret.txt\n") {
		t.Errorf("the view shows a hidden file: %s", body)
	}
	if b := h.ledger(); bytes.Contains(b, []byte(escapetest.Secret)) {
		t.Errorf("the secret is in the ledger")
	}
}

// TestReview4NestedRootsNever: with nested roots ("workspace" and
// "workspace/src") a never glob anchored at a root ("private/**") hides
// workspace/src/private under every spelling. It was hidden only when the
// request was spelled beneath workspace/src: "workspace/src/../src/private/k",
// "workspace/other/../src/private/k" or a symlink in workspace resolved
// beneath "workspace" alone, and the file was read, overwritten and
// deleted; a listing of workspace/src beneath "workspace" showed "private".
// docs/security.md, "The fourth review"
func TestReview4NestedRootsNever(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	testutil.Must(t, os.Chmod(base, 0o755))
	ws := filepath.Join(base, "workspace")
	testutil.Must(t, os.MkdirAll(filepath.Join(ws, "src/private"), 0o755))
	testutil.Must(t, os.MkdirAll(filepath.Join(ws, "other"), 0o755))
	secret := filepath.Join(ws, "src/private/k")
	testutil.Must(t, os.WriteFile(secret, []byte(escapetest.Secret+" k\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "src/main.py"), []byte("print('hello')\n"), 0o644))
	testutil.Must(t, os.Symlink("src", filepath.Join(ws, "link")))
	roots := `"roots":["workspace","workspace/src"],"never":["private/**"]`
	m := writeManifest(t, base, `{"schema_version":1,"tools":{
	  "read_file":{"operation":"read",`+roots+`},
	  "list_dir":{"operation":"list",`+roots+`},
	  "write_file":{"operation":"write",`+roots+`},
	  "delete_file":{"operation":"delete",`+roots+`}}}`)
	h := start(t, m, securefs.ModeAuto)
	spellings := []string{"workspace/src/private/k", "workspace/src/../src/private/k",
		"workspace/other/../src/private/k", "workspace/link/private/k"}
	for _, p := range spellings {
		res, body := h.call("read_file", map[string]any{"path": p})
		if res.Verdict != "deny" || res.Reason != "never_listed" {
			t.Errorf("read_file %q: %s/%s, want deny/never_listed", p, res.Verdict, res.Reason)
		}
		if bytes.Contains(body, []byte(escapetest.Secret)) {
			t.Errorf("read_file %q: the secret is in the response: %s", p, body)
		}
		if res, body = h.call("write_file", map[string]any{"path": p, "content": "pwned\n"}); res.Verdict != "deny" || res.Reason != "never_listed" {
			t.Errorf("write_file %q: %s/%s, want deny/never_listed: %s", p, res.Verdict, res.Reason, body)
		}
		if res, body = h.call("delete_file", map[string]any{"path": p}); res.Verdict != "deny" || res.Reason != "never_listed" {
			t.Errorf("delete_file %q: %s/%s, want deny/never_listed: %s", p, res.Verdict, res.Reason, body)
		}
		dir := strings.TrimSuffix(p, "/k")
		if res, body = h.call("list_dir", map[string]any{"path": dir}); res.Verdict != "deny" || res.Reason != "never_listed" {
			t.Errorf("list_dir %q: %s/%s, want deny/never_listed: %s", dir, res.Verdict, res.Reason, body)
		}
	}
	for _, p := range []string{"workspace/src", "workspace/other/../src", "workspace/link"} {
		res, body := h.call("list_dir", map[string]any{"path": p})
		if res.Verdict != "allow" || res.Output == nil || !strings.Contains(*res.Output, `"main.py"`) {
			t.Errorf("list_dir %q: %s/%s, want allow with main.py: %s", p, res.Verdict, res.Reason, body)
		}
		if bytes.Contains(body, []byte(`"private"`)) {
			t.Errorf("list_dir %q shows a hidden name: %s", p, body)
		}
	}
	if b, err := os.ReadFile(secret); err != nil || !bytes.Contains(b, []byte(escapetest.Secret)) {
		t.Errorf("the hidden file changed: %q, %v", b, err)
	}
	if b := h.ledger(); bytes.Contains(b, []byte(escapetest.Secret)) {
		t.Errorf("the secret is in the ledger")
	}
}

// TestReview4NestedRootsCaseInsensitive: nested roots on a case-insensitive
// disk. "workspace/SRC/private/key" lies lexically beneath "workspace"
// alone, and the kernel names what it opened with the spelling asked for;
// the inner root "workspace/src" still hides it.
// docs/security.md, "The fourth review"
func TestReview4NestedRootsCaseInsensitive(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	testutil.Must(t, os.Chmod(base, 0o755))
	backing := filepath.Join(base, "backing")
	testutil.Must(t, os.MkdirAll(filepath.Join(backing, "src/private"), 0o755))
	testutil.Must(t, os.MkdirAll(filepath.Join(base, "workspace"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(backing, "src/private/key"), []byte(escapetest.Secret+" key\n"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(backing, "src/main.py"), []byte("print('hello')\n"), 0o644))
	mountCaseInsensitive(t, backing, filepath.Join(base, "workspace"))
	roots := `"roots":["workspace","workspace/src"],"never":["private/**"]`
	m := writeManifest(t, base, `{"schema_version":1,"tools":{
	  "read_file":{"operation":"read",`+roots+`},
	  "list_dir":{"operation":"list",`+roots+`}}}`)
	h := start(t, m, securefs.ModeAuto)
	if res, body := h.call("read_file", map[string]any{"path": "workspace/SRC/main.py"}); res.Verdict != "allow" {
		t.Fatalf("read_file workspace/SRC/main.py: %s/%s, want allow (is the loopback case-insensitive?): %s", res.Verdict, res.Reason, body)
	}
	for _, p := range []string{"workspace/SRC/private/key", "workspace/Src./private/key", "workspace/SRC/../src/private/key"} {
		res, body := h.call("read_file", map[string]any{"path": p})
		if res.Verdict != "deny" || res.Reason != "never_listed" {
			t.Errorf("read_file %q: %s/%s, want deny/never_listed", p, res.Verdict, res.Reason)
		}
		if bytes.Contains(body, []byte(escapetest.Secret)) {
			t.Errorf("read_file %q: the secret is in the response: %s", p, body)
		}
	}
	res, body := h.call("list_dir", map[string]any{"path": "workspace/SRC"})
	if res.Verdict != "allow" || bytes.Contains(body, []byte(`"private"`)) {
		t.Errorf("list_dir workspace/SRC: %s/%s, want allow without private: %s", res.Verdict, res.Reason, body)
	}
}
