//go:build linux

package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Profile is a compiled seccomp profile, ready for a Spec.
type Profile = configs.Seccomp

// ParseSeccomp reads a seccomp profile in the OCI runtime-spec
// LinuxSeccomp format (what Docker's and containerd's profiles are), so an
// operator can bring their own. Unknown keys are errors.
func ParseSeccomp(data []byte) (*configs.Seccomp, error) {
	var prof specs.LinuxSeccomp
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&prof); err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	if prof.DefaultAction == "" {
		return nil, fmt.Errorf("seccomp profile: defaultAction is required")
	}
	if prof.DefaultAction == specs.ActAllow {
		return nil, fmt.Errorf("seccomp profile: defaultAction SCMP_ACT_ALLOW makes a denylist; write an allowlist (defaultAction SCMP_ACT_ERRNO)")
	}
	sc, err := specconv.SetupSeccomp(&prof)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	return sc, nil
}
