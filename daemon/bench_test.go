//go:build linux

package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// BenchmarkReadFile is read_file of a small file over the socket through
// an in-process daemon, client included: for profiling the call path.
func BenchmarkReadFile(b *testing.B) {
	fx := escapetest.Build(b)
	h := startB(b, fx.Manifest)
	req := api.CallRequest{Tool: "read_file", Args: json.RawMessage(`{"path":"workspace/src/a.py"}`)}
	b.ReportAllocs()
	if p := os.Getenv("SLUICE_BENCH_PAR"); p != "" {
		n, _ := strconv.Atoi(p)
		b.SetParallelism(n)
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := h.Call(context.Background(), req)
			if err != nil || !res.OK {
				b.Fatal(err, res)
			}
		}
	})
}

// BenchmarkWrite is write_file of 4 KiB over the socket (a new file each
// time, and an overwrite of one file), side by side with the floor: the
// same bytes written, fsynced, renamed into place and the directory
// fsynced, by hand, in the same directory, in the same run.
func BenchmarkWrite(b *testing.B) {
	fx := escapetest.Build(b)
	m := filepath.Join(fx.Base, "write-bench.json")
	testutil.Must(b, os.WriteFile(m, []byte(`{"schema_version":1,"tools":{"w":{"operation":"write","roots":["workspace/src"]}}}`), 0o644))
	h := startB(b, m)
	content := strings.Repeat("0123456789abcde\n", 256)
	dir := filepath.Join(fx.Base, "workspace/src")
	call := func(b *testing.B, path string) {
		args, _ := json.Marshal(map[string]any{"path": path, "content": content})
		res, err := h.Call(context.Background(), api.CallRequest{Tool: "w", Args: args})
		if err != nil || !res.OK {
			b.Fatal(err, res)
		}
	}
	floor := func(b *testing.B, name string) {
		tmp := filepath.Join(dir, ".floor-tmp")
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		f.WriteString(content)
		f.Sync()
		f.Close()
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			b.Fatal(err)
		}
		d, err := os.Open(dir)
		testutil.Must(b, err)
		d.Sync()
		d.Close()
	}
	b.Run("sluice/new", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			call(b, "workspace/src/new-"+strconv.Itoa(i)+".txt")
		}
	})
	b.Run("floor/new", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			floor(b, "floor-new-"+strconv.Itoa(i)+".txt")
		}
	})
	b.Run("sluice/overwrite", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			call(b, "workspace/src/over.txt")
		}
	})
	b.Run("floor/overwrite", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			floor(b, "floor-over.txt")
		}
	})
}

// BenchmarkApprovalRoundTrip: a streamed call that needs approval, approved
// by a second client as soon as its pending event arrives, to its result.
func BenchmarkApprovalRoundTrip(b *testing.B) {
	fx := escapetest.Build(b)
	m := filepath.Join(fx.Base, "approve-bench.json")
	testutil.Must(b, os.WriteFile(m, []byte(`{"schema_version":1,"tools":{"ask":{"operation":"read","roots":["workspace/src"],"approval":"human"}}}`), 0o644))
	approver := startB(b, m) // no principals: every peer is local, and uid 0 approves
	// The agent is another uid: nobody approves a call of its own.
	agent := clientAs(approver.Socket, agentUID)
	defer agent.Close()
	req := api.CallRequest{Tool: "ask", Args: json.RawMessage(`{"path":"workspace/src/a.py"}`)}
	for i := 0; i < b.N; i++ {
		res, err := agent.Stream(context.Background(), req, func(ev api.Event) error {
			if ev.Verdict == api.VerdictPending {
				_, err := approver.Decide(context.Background(), ev.ApprovalID, true, "")
				return err
			}
			return nil
		})
		if err != nil || !res.OK {
			b.Fatal(err, res)
		}
	}
}
