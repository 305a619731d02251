//go:build !linux

package audit

import (
	"errors"
	"os"
)

// ledgerIdentity is unknown off Linux: RingTail then replays into a
// ledger only what continues a non-empty chain, as Open would.
func ledgerIdentity(*os.File) (walIdentity, error) {
	return walIdentity{}, errors.ErrUnsupported
}
