//go:build linux

package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestMkdirTable: mkdir over the socket, allowed cases, errors and
// escapes, with and without parents.
func TestMkdirTable(t *testing.T) {
	base, h := changeFixture(t)
	ws := filepath.Join(base, "ws")
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "file"), []byte("f\n"), 0o644))
	testutil.Must(t, os.MkdirAll(filepath.Join(ws, "real"), 0o755))
	testutil.Must(t, os.Symlink("real", filepath.Join(ws, "inlink")))
	call := func(args map[string]any) *api.CallResult { r, _ := h.call("make_dir", args); return r }
	created := func(res *api.CallResult) []string {
		var out struct{ Created []string }
		if err := json.Unmarshal([]byte(derefOr(res.Output)), &out); err != nil {
			t.Fatalf("output %q: %v", derefOr(res.Output), err)
		}
		return out.Created
	}
	old := syscall.Umask(0o077) // the mode is the tool's, whatever the umask
	defer syscall.Umask(old)

	for _, tc := range []struct {
		name   string
		args   map[string]any
		reason api.Reason
	}{
		{"missing parent", map[string]any{"path": "ws/a/b/c"}, api.ReasonNotFound},
		{"over a file", map[string]any{"path": "ws/file"}, api.ReasonNotADirectory},
		{"over a symlink", map[string]any{"path": "ws/out.txt"}, api.ReasonNotADirectory},
		{"under a file, parents", map[string]any{"path": "ws/file/x", "parents": true}, api.ReasonPreconditionFailed},
		{"never by name", map[string]any{"path": "ws/.env"}, api.ReasonNeverListed},
		{"never by path, parents", map[string]any{"path": "ws/private/a/b", "parents": true}, api.ReasonNeverListed},
		{"outside", map[string]any{"path": "outside/x"}, api.ReasonOutsideRoots},
		{"dotdot", map[string]any{"path": "ws/../outside/x", "parents": true}, api.ReasonOutsideRoots},
		{"absolute", map[string]any{"path": filepath.Join(base, "ws/x")}, api.ReasonInvalidPath},
		{"through a symlink out", map[string]any{"path": "ws/out/x"}, api.ReasonOutsideRoots},
		{"through a symlink out, parents", map[string]any{"path": "ws/out/x/y", "parents": true}, api.ReasonOutsideRoots},
		{"dotdot below, parents", map[string]any{"path": "ws/n/../m/x", "parents": true}, api.ReasonInvalidPath},
	} {
		res := call(tc.args)
		if res.Reason != tc.reason || res.OK {
			t.Errorf("%s: %s ok=%v (%s), want %s", tc.name, res.Reason, res.OK, derefOr(res.Output), tc.reason)
		}
	}
	outsideIntact(t, base)
	for _, p := range []string{"a", "private", ".env", "n", "m"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); !os.IsNotExist(err) {
			t.Errorf("ws/%s was made by a refused call: %v", p, err)
		}
	}

	res := call(map[string]any{"path": "ws/d"})
	if !res.OK || fmt.Sprint(created(res)) != "[ws/d]" {
		t.Fatalf("mkdir: %+v %q", res, derefOr(res.Output))
	}
	if fi, err := os.Lstat(filepath.Join(ws, "d")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
		t.Fatalf("ws/d: %v %v, want a directory of mode 0750 (dir_mode)", fi, err)
	}
	if res := call(map[string]any{"path": "ws/d"}); res.OK || res.Reason != api.ReasonPreconditionFailed {
		t.Fatalf("mkdir of an existing directory without parents: %+v", res)
	}
	res = call(map[string]any{"path": "ws/a/b/c", "parents": true})
	if !res.OK || fmt.Sprint(created(res)) != "[ws/a ws/a/b ws/a/b/c]" {
		t.Fatalf("mkdir parents: %+v %q", res, derefOr(res.Output))
	}
	for _, p := range []string{"a", "a/b", "a/b/c"} {
		if fi, err := os.Lstat(filepath.Join(ws, p)); err != nil || fi.Mode().Perm() != 0o750 {
			t.Fatalf("ws/%s: %v %v", p, fi, err)
		}
	}
	if res := call(map[string]any{"path": "ws/a/b/c", "parents": true}); !res.OK || len(created(res)) != 0 {
		t.Fatalf("mkdir parents of what exists: %+v", res)
	}
	// A symlink beneath the root is followed while it stays there, as
	// every file tool's path is: the directory is made where it leads.
	if res := call(map[string]any{"path": "ws/inlink/x", "parents": true}); !res.OK || fmt.Sprint(created(res)) != "[ws/real/x]" {
		t.Fatalf("mkdir through a symlink inside the root: %+v %q", res, derefOr(res.Output))
	}
}

// TestMkdirSwapRace: a component of the path is swapped for a symlink to
// outside in a loop while mkdirs with parents run beneath it; no
// directory is ever made outside. The race must really have run.
func TestMkdirSwapRace(t *testing.T) {
	base, h := changeFixture(t)
	ws := filepath.Join(base, "ws")
	dir := filepath.Join(ws, "target")
	testutil.Must(t, os.MkdirAll(dir, 0o755))
	testutil.Must(t, os.Symlink("../outside", filepath.Join(ws, "swap")))
	sw := testutil.Swap(t, func(int) error {
		return unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, filepath.Join(ws, "swap"), unix.RENAME_EXCHANGE)
	})
	done, refused, overlapped := 0, 0, 0
	reasons := map[api.Reason]int{}
	for i := 0; i < 200; i++ {
		n := sw.Swaps()
		res, _ := h.call("make_dir", map[string]any{"path": fmt.Sprintf("ws/target/d%d/e", i), "parents": i%2 == 0})
		if sw.Swaps() != n {
			overlapped++
		}
		if res.OK {
			done++
			continue
		}
		refused++
		reasons[res.Reason]++
		switch res.Reason {
		case api.ReasonOutsideRoots, api.ReasonNotFound, api.ReasonPreconditionFailed:
		default:
			t.Errorf("mkdir %d refused %s", i, res.Reason)
		}
	}
	if err := sw.Stop(); err != nil {
		t.Fatalf("swap: %v", err)
	}
	outsideIntact(t, base)
	t.Logf("%d swaps, %d mkdirs overlapped a swap, %d done, %d refused %v", sw.Swaps(), overlapped, done, refused, reasons)
	if sw.Swaps() == 0 || overlapped == 0 {
		t.Fatalf("the race was not exercised: %d swaps, %d during a mkdir", sw.Swaps(), overlapped)
	}
	if done == 0 || refused == 0 {
		t.Fatalf("the race never went both ways: %d done, %d refused", done, refused)
	}
}
