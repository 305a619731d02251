//go:build linux

package sandbox

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/profiles"
)

// The test binary is re-executed as each container's init.
func init() { MaybeInit() }

func TestMain(m *testing.M) { testutil.Main(m) }

func newRunner(t testing.TB) *Runner {
	t.Helper()
	return newRunnerWith(t, Options{})
}

func newRunnerWith(t testing.TB, opts Options) *Runner {
	t.Helper()
	testutil.RequireRoot(t)
	r, err := NewRunnerWith(t.TempDir(), testutil.Helper(t), slog.New(slog.NewTextHandler(io.Discard, nil)), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Wait()
		if m := r.MountsUnderRunDir(); len(m) > 0 {
			t.Errorf("mounts left in the daemon's namespace: %v", m)
		}
		r.Close()
		if left := r.CgroupLeftovers(); len(left) > 0 {
			t.Errorf("cgroups left behind: %v", left)
		}
		ents, _ := os.ReadDir(r.rootfsDir())
		if len(ents) > 0 {
			t.Errorf("%d rootfs dirs left behind", len(ents))
		}
	})
	return r
}

func defaultSpec(t testing.TB) *Spec {
	sc, err := ParseSeccomp(profiles.DefaultSeccomp)
	if err != nil {
		t.Fatal(err)
	}
	return &Spec{Env: []string{"PATH=" + DefaultPath}, Seccomp: sc,
		Limits: Limits{MemoryBytes: 256 << 20, Pids: 64, Timeout: 10 * time.Second}}
}

func TestSmoke(t *testing.T) {
	r := newRunner(t)
	b, err := r.Create(defaultSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Exec(context.Background(), []string{"sh", "-c", "echo hello; id -u; cat /proc/self/status | grep -E 'Cap|NoNew|Seccomp'; ls /proc/self/fd"}, 65536, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", res.ExitCode, res.Stdout, res.Stderr)
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "hello") {
		t.Fatal("smoke failed")
	}
}
