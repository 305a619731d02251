package deptest

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// portable are the packages that must build, and be useful, off Linux:
// the wire types and client an orchestrator imports on a Mac, the CLI and
// its MCP bridge, and reading and re-deciding a ledger (sluice audit
// verify, sluice replay). linuxOnly are the packages that must not creep
// into them: on other platforms they hold at most an ErrUnsupported.
var (
	portable  = []string{"api", "client", "mcp", "audit", "authz", "replay", "cmd/sluice", "cmd/sluice/cli", "internal/scaffold", "internal/atomicfile"}
	linuxOnly = []string{"daemon", "sandbox", "internal/fsview", "internal/securefs", "internal/fileop", "internal/walk"}
)

// TestPortable lists the portable packages' dependencies as darwin and
// windows see them: each must be there (not excluded by build
// constraints, no missing package) and none may need a Linux-only one.
// It names the boundary; scripts/test.sh type-checks it, running
// GOOS=darwin and GOOS=windows go vet ./... and go build.
func TestPortable(t *testing.T) {
	var args []string
	for _, p := range portable {
		args = append(args, mod+p)
	}
	for _, goos := range []string{"darwin", "windows"} {
		cmd := exec.Command("go", append([]string{"list", "-e", "-deps", "-json=ImportPath,Error,DepsErrors"}, args...)...)
		cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("GOOS=%s go list: %v", goos, err)
		}
		dec := json.NewDecoder(strings.NewReader(string(out)))
		seen := map[string]bool{}
		for dec.More() {
			var p struct {
				ImportPath string
				Error      *struct{ Err string }
			}
			if err := dec.Decode(&p); err != nil {
				t.Fatal(err)
			}
			seen[p.ImportPath] = true
			if p.Error != nil {
				t.Errorf("GOOS=%s: %s: %s", goos, p.ImportPath, p.Error.Err)
			}
			for _, l := range linuxOnly {
				if p.ImportPath == mod+l {
					t.Errorf("GOOS=%s: a portable package depends on %s, which needs Linux", goos, l)
				}
			}
		}
		for _, p := range portable {
			if !seen[mod+p] {
				t.Errorf("GOOS=%s: go list did not see %s", goos, p)
			}
		}
	}
}
