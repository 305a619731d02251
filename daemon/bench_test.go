package daemon

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
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
