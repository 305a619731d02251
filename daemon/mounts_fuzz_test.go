//go:build linux

package daemon

import (
	"encoding/json"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/daemon/policyfiles"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/sandbox"
)

// FuzzLoadMounts: loading an execute tool's mounts and cwd (authz.Parse,
// then buildExec, as loadPolicy does) never panics and leaks no fd; a
// manifest Parse accepts names its mounts relative to base, never climbing
// out; and the mounts buildExec accepts, resolved by the kernel over the
// escape fixture (symlinks out, loops, /proc links, fifos, sockets,
// devices), lie beneath base, do not nest, are what each view serves, and
// the cwd of a relative "cwd" lies beneath base too.
//
// mounts is newline-separated; baseSel picks the manifest's base from a few
// inside the fixture, through a symlink too.
func FuzzLoadMounts(f *testing.F) {
	fx := escapetest.Build(f)
	for _, s := range []struct {
		mounts, cwd string
		base        uint8
	}{
		{"workspace/src", "", 0},
		{"workspace/src\nworkspace/tests", "workspace/tests", 0},
		{"workspace/src\nworkspace/src/sub", "", 0},
		{"workspace/src/in_dir_link\nworkspace/src/sub", "/tmp", 0},
		{"workspace/src/dir_out\nworkspace/src/dir_out_abs", "", 0},
		{"workspace/src/abs_out\nworkspace/src/rel_out\nworkspace/src/climb_back", "", 0},
		{"workspace/src/a.py\nworkspace/src/in_link", "workspace/src", 0},
		{"workspace/src/a.py\nworkspace/tests", "", 0},
		{"workspace/src/proc_root\nworkspace/src/proc_cwd\nworkspace/src/devzero", "", 0},
		{"workspace/src/fifo\nworkspace/src/sock\nworkspace/src/devnode\nworkspace/src/loop1", "", 0},
		{".", ".", 0},
		{"../x\n/etc", "../..", 0},
		{"src/../tests", "sub/../..", 1},
		{"sub\n.", "sub/deep", 2},
		{"sub/deep\nsub", "", 3},
		{"./sub/./deep/", "./", 2},
	} {
		f.Add(s.mounts, s.cwd, s.base)
	}
	bases := []string{"", "workspace", "workspace/src", "workspace/src/in_dir_link"}
	files := policyfiles.New()
	f.Fuzz(func(t *testing.T, mounts, cwd string, baseSel uint8) {
		tool := map[string]any{"operation": "execute", "commands": [][]string{{"true"}}, "pool": 0}
		if mounts != "" {
			tool["mounts"] = strings.Split(mounts, "\n")
		}
		if cwd != "" {
			tool["cwd"] = cwd
		}
		doc := map[string]any{"schema_version": 1, "tools": map[string]any{"run": tool}}
		if b := bases[int(baseSel)%len(bases)]; b != "" {
			doc["base"] = b
		}
		data, err := json.Marshal(doc)
		if err != nil {
			t.Skip(err) // not representable as JSON
		}
		m, err := authz.Parse(strings.NewReader(string(data)), fx.Base)
		if err != nil {
			return
		}
		tl := m.Tools["run"]
		for _, mnt := range tl.Mounts {
			c := path.Clean(mnt)
			if path.IsAbs(mnt) || strings.ContainsRune(mnt, 0) || c == ".." || strings.HasPrefix(c, "../") {
				t.Fatalf("Parse accepted mount %q, which is not beneath base", mnt)
			}
		}
		if tl.Cwd != "" && !filepath.IsAbs(tl.Cwd) {
			c := path.Clean(tl.Cwd)
			if c == ".." || strings.HasPrefix(c, "../") {
				t.Fatalf("Parse accepted cwd %q, which is not beneath base", tl.Cwd)
			}
		}

		fds := countFDs(t)
		defer func() {
			if n := countFDs(t); n != fds {
				t.Fatalf("mounts %q: %d fds before, %d after", mounts, fds, n)
			}
		}()
		base, err := securefs.OpenRoot(m.BaseDir, securefs.ModeOpenat2)
		if err != nil {
			return
		}
		defer base.Close()
		basePath, err := base.Path()
		if err != nil {
			t.Fatal(err)
		}
		beneath := func(p string) bool { return p == basePath || strings.HasPrefix(p, basePath+"/") }
		e, err := buildExec("run", tl, base, m.BaseDir, files)
		if err != nil {
			return
		}
		defer e.close()
		if len(e.mounts) != len(tl.Mounts) {
			t.Fatalf("%d mounts for %d in the manifest", len(e.mounts), len(tl.Mounts))
		}
		for i, vm := range e.mounts {
			if !beneath(vm.Dest) || sandbox.CheckDest(vm.Dest) != nil {
				t.Fatalf("mounts[%d] %q: ESCAPE: dest %q, base %q", i, tl.Mounts[i], vm.Dest, basePath)
			}
			rp, err := vm.Source.Root.Path()
			if err != nil {
				t.Fatal(err)
			}
			if got := filepath.Join(rp, vm.Source.Name); got != vm.Dest {
				t.Fatalf("mounts[%d] %q: the view serves %q at %q", i, tl.Mounts[i], got, vm.Dest)
			}
			for j := range i {
				d := e.mounts[j].Dest
				if d == vm.Dest || strings.HasPrefix(vm.Dest, d+"/") || strings.HasPrefix(d, vm.Dest+"/") {
					t.Fatalf("mounts %q and %q overlap: %q and %q", tl.Mounts[j], tl.Mounts[i], d, vm.Dest)
				}
			}
		}
		cw := e.spec.Cwd
		if !filepath.IsAbs(cw) || filepath.Clean(cw) != cw {
			t.Fatalf("cwd %q: spec cwd %q", tl.Cwd, cw)
		}
		if tl.Cwd != "" && !filepath.IsAbs(tl.Cwd) && !beneath(cw) {
			t.Fatalf("cwd %q: spec cwd %q is not beneath base %q", tl.Cwd, cw, basePath)
		}
	})
}
