//go:build linux

package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestEventsRefuseStrangers: a uid that is no principal of the manifest
// may not follow GET /v1/events (found by the fourth review: eight such
// uids could hold all the followers' slots, and the agents' MCP bridges
// would miss tools/list_changed); a principal still may, and so may
// everyone when the manifest declares no principals.
func TestEventsRefuseStrangers(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	m := writeManifest(t, fx.Base, `{"schema_version":1,
	  "principals":{"agent":{"uids":[4242],"tools":["*"]},"ops":{"uids":[0],"approver":true,"tools":[]}},
	  "tools":{"read_file":{"operation":"read","roots":["workspace/src"]}}}`)
	dir := t.TempDir()
	cfg := Config{Manifest: m, Socket: filepath.Join(dir, "sluice.sock"), StateDir: filepath.Join(dir, "state"),
		Logger: slog.New(slog.NewJSONHandler(&lockedBuf{}, nil)), ResolveMode: securefs.ModeAuto,
		RunDir: filepath.Join(dir, "run"), Helper: testutil.Helper(t)}
	stop := launch(t, cfg)
	defer stop()
	stranger := clientAs(cfg.Socket, 31337)
	defer stranger.Close()
	// Let in, the stranger's first event ends the follow with an error.
	err := stranger.Events(context.Background(), func(e api.DaemonEvent) error {
		return fmt.Errorf("a stranger was let in: %s", e.Event)
	})
	if err == nil || !strings.Contains(err.Error(), "not a principal") {
		t.Fatalf("a stranger's events: %v, want refused as no principal", err)
	}
	agent := clientAs(cfg.Socket, agentUID)
	defer agent.Close()
	ev, done := follow(agent)
	if e := nextEvent(t, ev, done, "subscribed"); e.Event != api.DaemonEventSubscribed {
		t.Fatalf("the agent's first event: %+v", e)
	}
}
