package egress

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// TestMain fails the package when goroutines of ours outlive the tests: a
// tunnel, a pinned transport or a proxy connection left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitLeaks(10 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func waitLeaks(d time.Duration) string {
	var leaked []string
	testutil.Poll(d, func() error {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		leaked = leaked[:0]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "sluice/egress.") && !strings.Contains(g, "egress.TestMain") && !strings.Contains(g, "egress.waitLeaks") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) > 0 {
			return fmt.Errorf("%d leaked", len(leaked))
		}
		return nil
	})
	return strings.Join(leaked, "\n\n")
}
