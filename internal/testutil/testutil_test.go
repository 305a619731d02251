package testutil

import (
	"fmt"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// A dump as runtime.Stack(all) writes it, with GOTRACEBACK's gp= form in
// one header.
const dump = `goroutine 1 [running]:
main.main()
	/x/main.go:3 +0x53

goroutine 7 gp=0xc000007a40 m=nil [chan receive, 2 minutes]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
	/go/src/runtime/proc.go:435 +0xce
runtime.chanrecv1(0xc0000a0000?, 0x0?)
	/go/src/runtime/chan.go:506 +0x12
github.com/sluicehq/sluice/daemon.(*Daemon).serve(0xc0000b2000)
	/x/daemon.go:10 +0x25
created by github.com/sluicehq/sluice/daemon.Run in goroutine 6
	/x/daemon.go:5 +0x1e
`

func TestParseGoroutines(t *testing.T) {
	gs := parseGoroutines(dump)
	if len(gs) != 2 || gs[0].ID != 1 || gs[0].Top != "main.main" || gs[0].State != "running" {
		t.Fatalf("parsed %+v", gs)
	}
	g := gs[1]
	if g.ID != 7 || g.State != "chan receive, 2 minutes" || g.Top != "github.com/sluicehq/sluice/daemon.(*Daemon).serve" ||
		g.CreatedBy != "github.com/sluicehq/sluice/daemon.Run" || !strings.HasPrefix(g.Stack, "goroutine 7 ") {
		t.Fatalf("parsed %+v", g)
	}
}

// TestLeakedGoroutines: a goroutine started after the snapshot is found
// by its identity, even when one that existed before exits meanwhile (a
// count would see no change), and is gone once it returns.
func TestLeakedGoroutines(t *testing.T) {
	exitOld := make(chan struct{})
	oldDone := make(chan struct{})
	go func() { <-exitOld; close(oldDone) }()
	before := Goroutines()
	close(exitOld)
	<-oldDone
	started, release, leakDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go leakyWait(started, release, leakDone)
	<-started
	leaked := LeakedGoroutines(before)
	if len(leaked) != 1 || !strings.HasSuffix(leaked[0].Top, "testutil.leakyWait") ||
		!strings.Contains(formatGoroutines(leaked), "testutil.leakyWait") {
		t.Fatalf("leaked: %+v", leaked)
	}
	close(release)
	<-leakDone
	if err := settle(func() error {
		if l := LeakedGoroutines(before); len(l) > 0 {
			return fmt.Errorf("still leaked: %s", formatGoroutines(l))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func leakyWait(started chan<- struct{}, release <-chan struct{}, done chan<- struct{}) {
	close(started)
	<-release
	defer close(done)
}
