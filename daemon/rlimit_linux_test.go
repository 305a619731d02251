//go:build linux

package daemon

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestDaemonRaisesNofile: sluiced raises its soft RLIMIT_NOFILE to the
// hard limit when it starts, whatever the process lowered it to.
// docs/security.md, "The second review (Hardening II)", "No container can take the daemon's file descriptors"
func TestDaemonRaisesNofile(t *testing.T) {
	testutil.RequireRoot(t)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	hard := lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 512, Max: hard}); err != nil {
		t.Fatal(err)
	}
	orig := lim
	t.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &orig) })
	fx := escapetest.Build(t)
	m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{"read_file":{"operation":"read","roots":["workspace/src"]}}}`)
	start(t, m, securefs.ModeAuto)
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur != hard {
		t.Errorf("soft RLIMIT_NOFILE %d after the daemon started, want the hard limit %d", lim.Cur, hard)
	}
}
