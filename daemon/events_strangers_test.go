//go:build linux

package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// TestEventsRefuseStrangers: a uid that is no principal of the manifest
// may not follow GET /v1/events (found by the fourth review: eight such
// uids could hold all the followers' slots, and the agents' MCP bridges
// would miss tools/list_changed); a principal still may, and so may
// everyone when the manifest declares no principals.
func TestEventsRefuseStrangers(t *testing.T) {
	_, cfg, stop := eventsDaemon(t)
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
