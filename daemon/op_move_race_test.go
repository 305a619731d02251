//go:build linux

package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestMovesDoNotRaceWalks: an agent's own moves cannot change the paths
// beneath a walk that checks never on them, nor race each other's checks
// (docs/security.md, "what sluice itself may rename"). Before Daemon.moves,
// a search of ws/x returned a never-listed file's line while the agent
// moved ws/x to ws/services and a hidden directory into it, and two
// concurrent moves made services/a/secrets/k readable as
// x/services/a/secrets/k. Each round runs the calls concurrently and
// requires that they overlapped in time; no round may leak. The first part
// fails without the lock (the search returns the hidden line in round 0);
// the second, two moves at once, is closed by construction (a move's walk
// and rename exclude every other move) and did not reproduce here without
// the lock in 10 rounds of 9,000 entries: it stays as a regression check.
func TestMovesDoNotRaceWalks(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	testutil.Must(t, os.Chmod(base, 0o755))
	ws := filepath.Join(base, "ws")
	put := func(rel, content string) {
		p := filepath.Join(ws, rel)
		testutil.Must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		testutil.Must(t, os.WriteFile(p, []byte(content), 0o644))
	}
	const secret = "RACESECRET-41d7"
	for i := range 3000 { // a walk long enough for the moves to land inside it
		put(fmt.Sprintf("x/big/f%04d.txt", i), "nothing to see\n")
	}
	testutil.Must(t, os.MkdirAll(filepath.Join(ws, "x/sub"), 0o755))
	testutil.Must(t, os.MkdirAll(filepath.Join(base, "ws2"), 0o755))
	put("old/p/a/secrets/k", secret+"\n")
	never := `"never":["services/*/*/secrets/**","old/*/*/secrets/**"]`
	m := writeManifest(t, base, `{"schema_version":1,"tools":{
	  "search":{"operation":"search","roots":["ws"],`+never+`,"max_bytes":1048576},
	  "list":{"operation":"list","roots":["ws"],`+never+`,"max_bytes":4194304},
	  "move":{"operation":"move","roots":["ws"],`+never+`},
	  "read":{"operation":"read","roots":["ws"],`+never+`},
	  "move2":{"operation":"move","roots":["ws2"],"never":["*/*/secrets/**"]},
	  "read2":{"operation":"read","roots":["ws2"],"never":["*/*/secrets/**"]}}}`)
	h := start(t, m, securefs.ModeAuto)
	reset := func() {
		for _, mv := range [][2]string{{"services/sub/a", "old/p/a"}, {"services", "x"}} {
			if _, err := os.Stat(filepath.Join(ws, mv[0])); err == nil {
				testutil.Must(t, os.Rename(filepath.Join(ws, mv[0]), filepath.Join(ws, mv[1])))
			}
		}
	}
	overlapped := 0
	for round := range 12 {
		reset()
		tool, args := "search", map[string]any{"path": "ws/x", "content": "RACESECRET"}
		if round%2 == 1 {
			tool, args = "list", map[string]any{"path": "ws/x", "depth": 4}
		}
		var wg sync.WaitGroup
		var walkStart, walkEnd, movesStart, movesEnd time.Time
		var body []byte
		wg.Add(2)
		go func() {
			defer wg.Done()
			walkStart = time.Now()
			_, body = h.call(tool, args)
			walkEnd = time.Now()
		}()
		go func() {
			defer wg.Done()
			movesStart = time.Now()
			h.call("move", map[string]any{"path": "ws/x", "to": "ws/services"})
			h.call("move", map[string]any{"path": "ws/old/p/a", "to": "ws/services/sub/a"})
			movesEnd = time.Now()
		}()
		wg.Wait()
		if strings.Contains(string(body), secret) || strings.Contains(string(body), `"secrets"`) {
			t.Fatalf("round %d: %s returned what never hides, while the agent moved the tree: %s", round, tool, body)
		}
		if movesStart.Before(walkEnd) && walkStart.Before(movesEnd) {
			overlapped++
		}
	}
	// Two moves at once: the second's walk must see the first's rename.
	// Under ws2 (never "*/*/secrets/**"): old/a/secrets is hidden, and so is
	// services/a/secrets, but x/services/a/secrets is not.
	ws2 := filepath.Join(base, "ws2")
	for round := range 8 {
		testutil.Must(t, os.RemoveAll(ws2))
		for i := range 3000 {
			p := filepath.Join(ws2, fmt.Sprintf("services/big/f%04d.txt", i))
			testutil.Must(t, os.MkdirAll(filepath.Dir(p), 0o755))
			testutil.Must(t, os.WriteFile(p, []byte("x\n"), 0o644))
		}
		testutil.Must(t, os.MkdirAll(filepath.Join(ws2, "x"), 0o755))
		testutil.Must(t, os.MkdirAll(filepath.Join(ws2, "old/a/secrets"), 0o755))
		testutil.Must(t, os.WriteFile(filepath.Join(ws2, "old/a/secrets/k"), []byte(secret+"\n"), 0o644))
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			h.call("move2", map[string]any{"path": "ws2/old/a", "to": "ws2/services/a"})
		}()
		go func() {
			defer wg.Done()
			h.call("move2", map[string]any{"path": "ws2/services", "to": "ws2/x/services"})
		}()
		wg.Wait()
		for _, p := range []string{"ws2/x/services/a/secrets/k", "ws2/services/a/secrets/k", "ws2/old/a/secrets/k"} {
			if _, body := h.call("read2", map[string]any{"path": p}); strings.Contains(string(body), secret) {
				t.Fatalf("round %d: %s is readable after two concurrent moves: %s", round, p, body)
			}
		}
	}
	if overlapped == 0 {
		t.Fatal("no round's walk and moves overlapped in time: the test proved nothing")
	}
	t.Logf("%d of 12 rounds overlapped a walk with the moves", overlapped)
}
