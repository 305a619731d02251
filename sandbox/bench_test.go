//go:build linux

package sandbox

import (
	"context"
	"sort"
	"testing"
	"time"
)

// BenchmarkExecPooled times Box.Exec of /bin/true on a waiting box: the
// sandbox's share of a pooled call (handing the argv over, the exec, the
// exit, reading the limit counters). Boxes are created outside the timer.
func BenchmarkExecPooled(b *testing.B) {
	r := newRunner(b)
	spec := defaultSpec(b)
	var lat []time.Duration
	for b.Loop() {
		b.StopTimer()
		box, err := r.Create(spec)
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // the helper waits on its stdin, as in a pool
		b.StartTimer()
		t := time.Now()
		res, err := box.Exec(context.Background(), []string{"/bin/true"}, 4096, nil)
		lat = append(lat, time.Since(t))
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %v %+v", err, res)
		}
	}
	b.StopTimer()
	r.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
}
