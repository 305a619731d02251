package authz_test

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/sandbox"
)

// TestReservedAgrees: the container paths a manifest's cache may not lie
// under (api.ReservedContainerPaths, which authz checks at load, as it
// may not import sandbox) are the ones the sandbox mounts itself.
func TestReservedAgrees(t *testing.T) {
	if !slices.Equal(api.ReservedContainerPaths, sandbox.Reserved) {
		t.Fatalf("api.ReservedContainerPaths %q, sandbox.Reserved %q: keep them one list", api.ReservedContainerPaths, sandbox.Reserved)
	}
}
