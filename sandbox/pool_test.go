//go:build linux

package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestCancelledBeforeExecRunsNothing: a call whose context ended before
// its box got the argv (cancelled while it waited for the pool or while a
// cold box was made) must not start its command, not even for the moment
// before the kill: the helper gets no argv and exits without running
// anything. Handed the argv and then killed, it ran "echo ran" to its end
// in 2 of 5 tries.
func TestCancelledBeforeExecRunsNothing(t *testing.T) {
	r := newRunner(t)
	for range 10 {
		b, err := r.Create(defaultSpec(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res, err := b.ExecHeld(ctx, []string{"sh", "-c", "echo ran"}, 1<<16, nil)
		b.Release()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err %v, want context.Canceled", err)
		}
		if res == nil {
			t.Fatal("no result")
		}
		// The helper exits for want of an argv, or is killed first.
		if len(res.Stdout) != 0 || !(strings.Contains(string(res.Stderr), "no argv received") || res.Signal == 9 && len(res.Stderr) == 0) {
			t.Errorf("a cancelled call's command ran: stdout %q, stderr %q, signal %d", res.Stdout, res.Stderr, res.Signal)
		}
	}
}

// TestBoxRunsOneCommand: a box takes one argv; a second exec on it (a
// box reused by mistake) runs nothing.
func TestBoxRunsOneCommand(t *testing.T) {
	r := newRunner(t)
	b, err := r.Create(defaultSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	res, err := b.ExecHeld(context.Background(), []string{"sh", "-c", "echo first"}, 1<<16, nil)
	if err != nil || string(res.Stdout) != "first\n" {
		t.Fatalf("first: %v %v", res, err)
	}
	res, err = b.ExecHeld(context.Background(), []string{"sh", "-c", "echo second"}, 1<<16, nil)
	if err == nil || (res != nil && len(res.Stdout) != 0) {
		t.Errorf("a second command on a used box: %v %v", res, err)
	}
}

// TestPoolCancelledWaitersLeakNothing: calls that wait on a pool and end
// (cancelled, timed out) at any moment, some just as their box arrives,
// leave no box, uid, cgroup, rootfs or mount behind once the pool is
// closed, and no box is handed to two of them.
func TestPoolCancelledWaitersLeakNothing(t *testing.T) {
	r := newRunner(t)
	f := newFixture(t)
	p := NewPoolSized(r, f.spec(t), PoolSize{Min: 1, Max: 2, ShrinkAfter: time.Hour}, r.log)
	if err := testutil.Poll(20*time.Second, poolFull(p, 1)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%12)*15*time.Millisecond)
			defer cancel()
			b := p.GetWait(ctx, time.Second)
			if b == nil {
				return
			}
			mu.Lock()
			dup := seen[b.ID]
			seen[b.ID] = true
			mu.Unlock()
			if dup {
				t.Errorf("box %s handed out twice", b.ID)
			}
			// As runExec: a call whose context ended releases its box
			// unused; else it runs its command (ended by ctx, at times).
			if ctx.Err() == nil {
				b.ExecHeld(ctx, []string{"true"}, 4096, nil)
			}
			b.Release()
		}()
	}
	wg.Wait()
	p.Close()
	r.Wait()
	r.ids.mu.Lock()
	live := len(r.ids.taken)
	r.ids.mu.Unlock()
	if live != 0 {
		t.Errorf("%d uids still held after the pool closed and every box was released", live)
	}
	t.Logf("%d of 24 waiting calls got a box", len(seen))
	// newRunner's cleanup checks cgroups, rootfs dirs and mounts.
}
