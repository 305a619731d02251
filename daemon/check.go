//go:build linux

package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/sandbox"
)

// errCheckOnly stands in for the sandbox runner under Check: a load that
// reaches it has passed every check that comes before the sandbox.
var errCheckOnly = errors.New("check only: the sandbox is not started")

// CheckSummary is what Check found in a manifest that loads.
type CheckSummary struct {
	Manifest      string // its absolute path
	PolicyVersion string
	Tools         int
	Execute       int // execute tools: their sandbox was not started
	Principals    int // 0: no principals section (root alone, as "local")
}

func (s CheckSummary) String() string {
	out := fmt.Sprintf("ok: %s: %d tools, %d principals, policy_version %s", s.Manifest, s.Tools, s.Principals, s.PolicyVersion)
	if s.Execute > 0 {
		out += fmt.Sprintf("; %d execute tools: their sandbox was not started (the kernel checks run at start)", s.Execute)
	}
	return out
}

// Check loads the manifest at path as a start (and a reload) does, without
// serving, locking dirs or opening the ledger: the same read of the file
// (policyfiles: a regular file, opened by a walk that records every
// directory it consulted), the same parse and validation (authz), base and every
// tool's roots opened beneath it (openat2; a missing root is a warning, as
// at start), each root checked to be named as the kernel names it, the
// write roots checked against the policy's own files (policyfiles), and
// execute tools' mounts resolved beneath base and their writes roots
// checked. What needs the sandbox is not done: no runner is made (cgroups,
// user namespaces, seccomp), the idmapped-tmpfs probe for caches does not
// run and no container starts; a start does those.
func Check(path string, log *slog.Logger) (CheckSummary, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// As Run: a manifest that does not parse is reported as such first.
	abs, m, err := parseManifestFile(path)
	if err != nil {
		return CheckSummary{}, err
	}
	p, err := loadPolicyWith(path, securefs.ModeAuto, log, func() (*sandbox.Runner, error) { return nil, errCheckOnly })
	if err != nil && !errors.Is(err, errCheckOnly) {
		return CheckSummary{}, err
	}
	if p != nil {
		defer p.close()
	}
	s := CheckSummary{Manifest: abs, PolicyVersion: m.Version, Tools: len(m.Tools), Principals: len(m.Principals)}
	for _, t := range m.Tools {
		if t.Operation == api.OpExecute {
			s.Execute++
		}
	}
	return s, nil
}

// parseManifestFile reads and parses a manifest as checkManifest does.
func parseManifestFile(path string) (string, *authz.Manifest, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, err
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return "", nil, fmt.Errorf("read manifest: %w", err)
	}
	m, err := authz.ParseFile(abs, bytes.NewReader(data), filepath.Dir(abs))
	return abs, m, err
}
