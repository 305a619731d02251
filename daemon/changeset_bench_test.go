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

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/testutil"
)

// BenchmarkChangeset200 is a command writing 200 new files of 4 KiB each
// in a fresh directory, over the socket, its changeset committed (auto)
// or dropped (discard, the command and the reading alone), side by side
// with the floor: the same 200 files written, fsynced and renamed into
// place by one process, and their directory fsynced, in the same run
// (issue 26's goal: auto ≤ 2× floor).
func BenchmarkChangeset200(b *testing.B) {
	testutil.RequireRoot(b)
	base := b.TempDir()
	testutil.Must(b, os.Chmod(base, 0o755))
	src := filepath.Join(base, "workspace/src")
	testutil.Must(b, os.MkdirAll(src, 0o755))
	tool := func(name, commit string) string {
		return `"` + name + `":{"operation":"execute","mounts":["workspace"],"cwd":"workspace/src","pool":2,
		  "commands":[["sh","-c",{"any":true},{"rest":{"any":true}}]],"writes":{"roots":["workspace/src"],"commit":"` + commit + `"}}`
	}
	m := writeManifest(b, base, `{"schema_version":1,"tools":{`+tool("auto", "auto")+","+tool("discard", "discard")+`}}`)
	c := startB(b, m)
	block := strings.Repeat("0123456789abcde\n", 256)
	run := func(b *testing.B, tool string, i int) {
		script := fmt.Sprintf(`mkdir d%d && cd d%d && i=0; while [ $i -lt 200 ]; do printf '%%s' "$0" > f$i; i=$((i+1)); done`, i, i)
		args, _ := json.Marshal(map[string]any{"argv": []string{"sh", "-c", script, block}})
		res, err := c.Call(context.Background(), api.CallRequest{Tool: tool, Args: args})
		if err != nil || !res.OK || len(res.Changes) != 201 {
			b.Fatal(err, res)
		}
	}
	floor := func(b *testing.B, i int) {
		dir := filepath.Join(src, fmt.Sprintf("floor%d", i))
		testutil.Must(b, os.Mkdir(dir, 0o755))
		for j := 0; j < 200; j++ {
			tmp := filepath.Join(dir, fmt.Sprintf(".t%d", j))
			f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			testutil.Must(b, err)
			_, err = f.WriteString(block)
			testutil.Must(b, err)
			testutil.Must(b, f.Sync())
			testutil.Must(b, f.Close())
			testutil.Must(b, os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("f%d", j))))
		}
		d, err := os.Open(dir)
		testutil.Must(b, err)
		testutil.Must(b, unix.Fsync(int(d.Fd())))
		d.Close()
	}
	n := 0
	b.Run("auto", func(b *testing.B) {
		for b.Loop() {
			n++
			run(b, "auto", n)
		}
	})
	b.Run("discard", func(b *testing.B) {
		for b.Loop() {
			n++
			run(b, "discard", n)
		}
	})
	b.Run("floor", func(b *testing.B) {
		for b.Loop() {
			n++
			floor(b, n)
		}
	})
}
