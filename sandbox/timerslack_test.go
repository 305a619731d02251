//go:build linux

package sandbox

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/timerslack"
)

// TestCommandsGetDefaultTimerSlack: sluiced raises its threads' timer
// slack (internal/timerslack), and a process keeps its slack across fork
// and exec; a container's command still runs with the kernel's default,
// since the container's init sets it back before it execs the helper.
// Without that reset the command reports sluiced's.
func TestCommandsGetDefaultTimerSlack(t *testing.T) {
	r := newRunner(t)
	if err := timerslack.SetProcess(timerslack.Daemon); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = timerslack.SetProcess(timerslack.Default) })
	b, err := r.Create(defaultSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Exec(context.Background(), []string{"cat", "/proc/self/timerslack_ns"}, 1<<10, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != strconv.Itoa(timerslack.Default) {
		t.Errorf("the command's timer slack %q, want %d", got, timerslack.Default)
	}
}
