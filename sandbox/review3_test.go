//go:build linux

package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
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
