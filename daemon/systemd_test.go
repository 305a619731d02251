//go:build linux

package daemon

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestNotify: READY=1 only once the pool is warm, STATUS= with a summary,
// RELOADING=1 then READY=1 around a reload, STOPPING=1 on shutdown.
func TestNotify(t *testing.T) {
	testutil.RequireRoot(t)
	notify, msgs := testutil.NotifySocket(t)
	t.Setenv("NOTIFY_SOCKET", notify)
	fx := escapetest.Build(t)
	m := writeManifest(t, fx.Base, `{"schema_version":1,
	  "tools":{"read_file":{"operation":"read","roots":["workspace/src"]},
	           "echo":{"operation":"execute","commands":[["echo","hi"]],"pool":1}}}`)
	dir := t.TempDir()
	cfg := Config{Manifest: m, Socket: filepath.Join(dir, "s.sock"), StateDir: filepath.Join(dir, "state"),
		RunDir: filepath.Join(dir, "run"), Helper: testutil.Helper(t), ResolveMode: securefs.ModeAuto,
		Logger: slog.New(slog.NewJSONHandler(&testutil.LockedBuffer{}, nil))}
	stop := launch(t, cfg)
	ready := testutil.AwaitNotify(t, msgs, "READY=1", "STOPPING=1")
	if !strings.Contains(ready, "STATUS=policy ") || !strings.Contains(ready, "2 tools") || !strings.Contains(ready, "pools 1/1 warm") {
		t.Errorf("READY=1 came without a warm pool's status: %q", ready)
	}
	c := clientAs(cfg.Socket, 0)
	defer c.Close()
	if _, err := c.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := testutil.AwaitNotify(t, msgs, "RELOADING=1", "READY=1"); !strings.Contains(r, "MONOTONIC_USEC=") {
		t.Errorf("RELOADING=1 without MONOTONIC_USEC: %q", r)
	}
	testutil.AwaitNotify(t, msgs, "READY=1", "STOPPING=1")
	stop()
	testutil.AwaitNotify(t, msgs, "STOPPING=1", "")
}
