//go:build linux

package sandbox

import (
	"context"
	"sort"
	"syscall"
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

// BenchmarkCreateCold times a cold call's sandbox share: Create (the
// container, its init — sluice-init — and the helper waiting) and then
// Exec of /bin/true on it. p50-create-µs is Create alone.
// container-cpu-µs/op is the CPU time the container's processes used.
func BenchmarkCreateCold(b *testing.B) {
	r := newRunner(b)
	spec := defaultSpec(b)
	var create, total []time.Duration
	var ru0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru0)
	for b.Loop() {
		t := time.Now()
		box, err := r.Create(spec)
		if err != nil {
			b.Fatal(err)
		}
		create = append(create, time.Since(t))
		res, err := box.Exec(context.Background(), []string{"/bin/true"}, 4096, nil)
		total = append(total, time.Since(t))
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %v %+v", err, res)
		}
		b.StopTimer()
		r.Wait() // the destroy is not the next call's cost
		b.StartTimer()
	}
	b.StopTimer()
	// CPU time of the containers' processes (the init with nsexec's
	// stages, the helper, /bin/true), all reaped: what a loaded machine
	// does not inflate much, unlike the latencies.
	var ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) / time.Duration(len(create))
	b.ReportMetric(float64(cpu.Microseconds()), "container-cpu-µs/op")
	p50 := func(d []time.Duration) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[len(d)/2].Microseconds())
	}
	b.ReportMetric(p50(create), "p50-create-µs")
	b.ReportMetric(p50(total), "p50-µs")
}

// BenchmarkCreateScratch compares Create of a box whose one view mount
// is a read-only bind (plain), an overlay over a scratch tmpfs
// (scratch), and plain with one idmapped cache bound (cache): p50 of
// Create alone, and of Create, Exec of /bin/true and, for scratch,
// TakeScratch and Close.
func BenchmarkCreateScratch(b *testing.B) {
	r := newRunner(b)
	f := newScratchFixture(b, r)
	c, err := NewCache(8 << 20)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, mode := range []string{"plain", "scratch", "cache"} {
		b.Run(mode, func(b *testing.B) {
			spec := f.spec(b, 64<<20)
			var opt CreateOptions
			switch mode {
			case "plain":
				spec.Scratch = nil
			case "cache":
				spec.Scratch = nil
				opt.Caches = []CacheBind{{Dest: "/tmp/.cache", Cache: c}}
			}
			var create, total []time.Duration
			for b.Loop() {
				t := time.Now()
				box, err := r.CreateWith(spec, opt)
				if err != nil {
					b.Fatal(err)
				}
				create = append(create, time.Since(t))
				res, err := box.ExecHeld(context.Background(), []string{"/bin/true"}, 4096, nil)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("exec: %v %+v", err, res)
				}
				box.TakeScratch().Close()
				total = append(total, time.Since(t))
				box.Release()
				b.StopTimer()
				r.Wait()
				b.StartTimer()
			}
			p50 := func(d []time.Duration) float64 {
				sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
				return float64(d[len(d)/2].Microseconds())
			}
			b.ReportMetric(p50(create), "p50-create-µs")
			b.ReportMetric(p50(total), "p50-µs")
		})
	}
}
