// Package deptest fails when an import crosses one of sluice's package
// boundaries (the habit of tailscale's tstest/deptest).
package deptest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/sluicehq/sluice/"

func TestImportBoundaries(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "seccomp", "-json", "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		seen++
		name := strings.TrimPrefix(p.ImportPath, mod)
		for _, imp := range p.Imports {
			if msg := forbidden(name, imp); msg != "" {
				t.Errorf("%s imports %s: %s", name, imp, msg)
			}
		}
	}
	if seen < 8 {
		t.Fatalf("go list saw only %d packages", seen)
	}
}

// forbidden returns why pkg may not import imp, or "".
func forbidden(pkg, imp string) string {
	ours := strings.HasPrefix(imp, mod)
	local := strings.TrimPrefix(imp, mod)
	thirdParty := strings.Contains(strings.Split(imp, "/")[0], ".") && !ours
	switch pkg {
	case "api":
		if ours || thirdParty {
			return "api is the wire contract: standard library only"
		}
	case "client":
		if (ours && local != "api") || thirdParty {
			return "the client imports only api and the standard library"
		}
	case "authz":
		switch imp {
		case "os", "os/exec", "syscall", "net", "net/http", "io/fs", "golang.org/x/sys/unix", "time":
			return "authz is pure: no syscalls, no I/O, no clock"
		}
		if ours && local != "api" && local != "internal/strictjson" && local != "internal/foldname" && local != "internal/redact" && local != "internal/secretscan" && local != "egress/netpolicy" {
			return "authz depends only on api, internal/strictjson, internal/foldname, internal/redact, internal/secretscan and egress/netpolicy"
		}
	case "egress/netpolicy":
		// The URL and address rules authz decides with: pure, so that
		// replay re-decides a fetch or post from the ledger alone.
		switch imp {
		case "os", "os/exec", "syscall", "net", "net/http", "io/fs", "golang.org/x/sys/unix", "crypto/tls":
			return pkg + " is pure: no syscalls, no I/O, no network"
		}
		if (ours && local != "api") || thirdParty {
			return pkg + " is a leaf: api (for the reasons its errors carry) and the standard library only"
		}
	case "internal/scaffold":
		// sluice init's manifest writer: text out, the project's top
		// level in; its tests load what it writes with authz and daemon.
		if (ours && local != "internal/atomicfile") || thirdParty {
			return pkg + " is a leaf: internal/atomicfile and the standard library only"
		}
	case "internal/atomicfile":
		// A file written whole or not at all (scaffold, clientsetup).
		if ours || thirdParty {
			return pkg + " is a leaf on the standard library"
		}
	case "internal/strictjson", "internal/foldname", "internal/jsonenc", "internal/redact", "internal/termsafe", "internal/udiff", "internal/secretscan":
		switch imp {
		case "os", "os/exec", "syscall", "net", "net/http", "io/fs", "golang.org/x/sys/unix":
			return pkg + " is pure: no syscalls, no I/O"
		}
		if ours || thirdParty {
			return pkg + " is a leaf on the standard library"
		}
	case "audit":
		if ours && local != "api" && local != "internal/jsonenc" {
			return pkg + " is a leaf: it imports only api (for the typed verdicts, reasons and operations its records carry) and internal/jsonenc"
		}
	case "internal/securefs":
		if ours && local != "api" {
			return pkg + " is a leaf: it imports only api (for the one Kind type)"
		}
	case "internal/fileop":
		if (ours && local != "internal/securefs" && local != "api" && local != "internal/foldname" && local != "internal/errclass") || (thirdParty && imp != "golang.org/x/sys/unix") {
			return pkg + " is a leaf: securefs, foldname, errclass, golang.org/x/sys/unix and the standard library only"
		}
	case "internal/walk":
		if (ours && local != "internal/jsonenc") || (thirdParty && imp != "golang.org/x/sys/unix") {
			return pkg + " walks beneath the fd it is given: internal/jsonenc, golang.org/x/sys/unix and the standard library only (the never rules stay authz's, passed in as a filter)"
		}
	case "internal/errclass":
		if (ours && local != "api") || (thirdParty && imp != "golang.org/x/sys/unix") {
			return pkg + " is the one classification of errors: api, golang.org/x/sys/unix and the standard library only"
		}
	case "replay":
		if ours && local != "api" && local != "audit" && local != "authz" {
			return "replay re-decides from the ledger alone: api, audit and authz only"
		}
		switch imp {
		case "os", "os/exec", "syscall", "net", "golang.org/x/sys/unix":
			return "replay touches no filesystem: it reads the reader it is given"
		}
	case "internal/fsview":
		if ours && local != "internal/securefs" && local != "api" {
			return pkg + " serves views through securefs alone"
		}
	case "daemon/mcphost":
		if ours && local != "api" && local != "client" && local != "mcp" {
			return pkg + " hosts `sluice mcp`'s bridge as a client of sluiced's handlers: api, client and mcp only (the peer is bound by the daemon, the calls decided by its handlers)"
		}
	case "mcp":
		// internal/jsonenc is encoding/json's string encoding without
		// reflection, no daemon code: the splice of a large output uses it.
		if ours && local != "api" && local != "client" && local != "internal/jsonenc" {
			return "sluice mcp is only a client of the socket: api, client (and internal/jsonenc, an encoder)"
		}
	case "cmd/sluice-init":
		// Every container's init: libcontainer's init and nothing of
		// the daemon's (docs/sandbox.md "CVE-2019-5736"). Never
		// internal/inithandoff, whose constructor would refuse it.
		if (ours && local != "internal/timerslack") ||
			(thirdParty && imp != "github.com/opencontainers/runc/libcontainer" && imp != "github.com/opencontainers/runc/libcontainer/nsenter") {
			return pkg + " is the container's init: libcontainer, its nsenter, internal/timerslack and the standard library only"
		}
	case "internal/inithandoff":
		if imp != "C" {
			return pkg + " is a C constructor: it imports nothing"
		}
	case "daemon", "sandbox":
		if strings.HasPrefix(local, "cmd/") {
			return "imports flow down: cmd -> daemon -> {authz, sandbox, audit} -> internal"
		}
	case "daemon/transport":
		// The socket and systemd side of the daemon: it knows nothing of
		// policies, calls, containers or the ledger.
		if ours && local != "api" && !strings.HasPrefix(local, "internal/") {
			return pkg + " is the daemon's transport: api, internal/... and the standard library; no authz, sandbox or audit"
		}
	case "daemon/admission", "daemon/spill":
		if ours && !strings.HasPrefix(local, "internal/") {
			return pkg + " is a leaf: internal/... and the standard library only"
		}
		if thirdParty && imp != "golang.org/x/sys/unix" {
			return pkg + " is a leaf: no third-party code but golang.org/x/sys/unix"
		}
	case "daemon/recovery":
		// Recovery reads the ledger and removes temp files beneath held
		// roots: it runs no container and reaches no network.
		if ours && local != "api" && local != "audit" && local != "authz" && !strings.HasPrefix(local, "internal/") {
			return pkg + " reads the ledger and removes temps beneath roots: api, audit, authz and internal/... only; no sandbox or egress"
		}
	case "daemon/policyfiles":
		if ours && local != "api" && local != "authz" && local != "sandbox" && !strings.HasPrefix(local, "internal/") {
			return pkg + " reads a policy's files: api, authz, sandbox (its seccomp profiles) and internal/... only"
		}
	}
	// daemon's subpackages are each one concern of the daemon: they import
	// neither daemon (the compiler refuses the cycle) nor each other, and
	// only daemon and sluiced's main import them (tests may).
	if ours && (local == "daemon" || strings.HasPrefix(local, "daemon/")) && strings.HasPrefix(pkg, "daemon/") {
		return "daemon's subpackages import neither daemon nor each other"
	}
	if ours && strings.HasPrefix(local, "daemon/") && pkg != "daemon" && pkg != "cmd/sluiced" {
		return "daemon's subpackages are daemon's own: only daemon and cmd/sluiced import them"
	}
	if ours && strings.HasPrefix(local, "cmd/") && !strings.HasPrefix(pkg, "cmd/") {
		return "nothing imports cmd/"
	}
	return ""
}

// TestDaemonFences: the rules on daemon's subpackages refuse what they
// are for, and allow what the packages need.
func TestDaemonFences(t *testing.T) {
	for _, c := range []struct {
		pkg, imp string
		refused  bool
	}{
		{"daemon/transport", mod + "authz", true},
		{"daemon/transport", mod + "sandbox", true},
		{"daemon/transport", mod + "audit", true},
		{"daemon/transport", mod + "daemon", true},
		{"daemon/transport", mod + "daemon/spill", true},
		{"daemon/transport", mod + "api", false},
		{"daemon/transport", "github.com/coreos/go-systemd/v22/activation", false},
		{"daemon/admission", mod + "api", true},
		{"daemon/admission", mod + "daemon/transport", true},
		{"daemon/spill", mod + "audit", true},
		{"daemon/spill", "golang.org/x/sys/unix", false},
		{"daemon/spill", "github.com/coreos/go-systemd/v22/daemon", true},
		{"daemon/recovery", mod + "sandbox", true},
		{"daemon/recovery", mod + "egress", true},
		{"daemon/recovery", mod + "daemon/spill", true},
		{"daemon/recovery", mod + "audit", false},
		{"daemon/recovery", mod + "internal/fileop", false},
		{"daemon/policyfiles", mod + "audit", true},
		{"daemon/policyfiles", mod + "sandbox", false},
		{"internal/udiff", mod + "api", true},
		{"daemon", mod + "daemon/transport", false},
		{"cmd/sluiced", mod + "daemon/transport", false},
		{"mcp", mod + "daemon/transport", true},
		{"daemon/mcphost", mod + "mcp", false},
		{"daemon/mcphost", mod + "client", false},
		{"daemon/mcphost", mod + "authz", true},
		{"daemon/mcphost", mod + "daemon/transport", true},
		{"cmd/sluice/cli", mod + "daemon/recovery", true},
		{"e2e", mod + "daemon/spill", true},
	} {
		if got := forbidden(c.pkg, c.imp) != ""; got != c.refused {
			t.Errorf("%s importing %s: refused %t, want %t", c.pkg, c.imp, got, c.refused)
		}
	}
}
