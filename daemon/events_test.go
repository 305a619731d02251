//go:build linux

package daemon

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// follow runs c.Events in the background; events get each event and done
// the error it ended with.
func follow(c *client.Client) (events <-chan api.DaemonEvent, done <-chan error) {
	ev, d := make(chan api.DaemonEvent, 64), make(chan error, 1)
	go func() {
		d <- c.Events(context.Background(), func(e api.DaemonEvent) error { ev <- e; return nil })
	}()
	return ev, d
}

func nextEvent(t *testing.T, events <-chan api.DaemonEvent, done <-chan error, what string) api.DaemonEvent {
	t.Helper()
	select {
	case e := <-events:
		return e
	case err := <-done:
		t.Fatalf("%s: the stream ended: %v", what, err)
	}
	panic("unreachable")
}

// TestEventsStream: GET /v1/events over the socket. Every follower, of any
// principal, is told the version in force when it subscribes, then each
// successful reload's policy_loaded (a refused reload sends nothing); at
// shutdown the stream ends, and the daemon stops without waiting on it.
func TestEventsStream(t *testing.T) {
	fx, cfg, stop := eventsDaemon(t)
	agent, ops := clientAs(cfg.Socket, agentUID), clientAs(cfg.Socket, 0)
	defer agent.Close()
	defer ops.Close()
	ctx := context.Background()
	before, err := ops.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	aev, adone := follow(agent)
	oev, odone := follow(ops)
	for _, f := range []struct {
		ev   <-chan api.DaemonEvent
		done <-chan error
	}{{aev, adone}, {oev, odone}} {
		if e := nextEvent(t, f.ev, f.done, "subscribed"); e.Event != api.DaemonEventSubscribed || e.PolicyVersion != before.PolicyVersion {
			t.Fatalf("first event: %+v, want subscribed at %s", e, before.PolicyVersion)
		}
	}
	// A refused reload sends nothing; the next good one sends its version
	// to both.
	writeManifest(t, fx.Base, `{"schema_version":1,"tools":{"read_file":{"operation":"read","roots":["../x"]}}}`)
	if _, err := ops.Reload(ctx); err == nil {
		t.Fatal("a bad manifest was loaded")
	}
	writeManifest(t, fx.Base, `{"schema_version":1,
	  "principals":{"agent":{"uids":[4242],"tools":["*"]},"ops":{"uids":[0],"approver":true,"tools":[]}},
	  "tools":{"read_file":{"operation":"read","roots":["workspace/src"]},"list_dir":{"operation":"list","roots":["workspace/src"]}}}`)
	after, err := ops.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		ev   <-chan api.DaemonEvent
		done <-chan error
	}{{aev, adone}, {oev, odone}} {
		if e := nextEvent(t, f.ev, f.done, "policy_loaded"); e.Event != api.DaemonEventPolicyLoaded || e.PolicyVersion != after.PolicyVersion {
			t.Fatalf("after the reload: %+v, want policy_loaded %s", e, after.PolicyVersion)
		}
	}
	// Shutdown ends the streams: the daemon does not wait for followers.
	stop()
	for _, done := range []<-chan error{adone, odone} {
		if err := <-done; !errors.Is(err, client.ErrEventsEnded) {
			t.Fatalf("the stream after shutdown: %v, want ErrEventsEnded", err)
		}
	}
}

// eventsDaemon starts a daemon whose manifest has an agent (uid 4242)
// and ops (uid 0, the approver), and one read tool.
func eventsDaemon(t *testing.T) (*escapetest.Fixture, Config, func()) {
	t.Helper()
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	m := writeManifest(t, fx.Base, `{"schema_version":1,
	  "principals":{"agent":{"uids":[4242],"tools":["*"]},"ops":{"uids":[0],"approver":true,"tools":[]}},
	  "tools":{"read_file":{"operation":"read","roots":["workspace/src"]}}}`)
	dir := t.TempDir()
	cfg := Config{Manifest: m, Socket: filepath.Join(dir, "sluice.sock"), StateDir: filepath.Join(dir, "state"),
		Logger: slog.New(slog.NewJSONHandler(&testutil.LockedBuffer{}, nil)), ResolveMode: securefs.ModeAuto,
		RunDir: filepath.Join(dir, "run"), Helper: testutil.Helper(t)}
	return fx, cfg, launch(t, cfg)
}
