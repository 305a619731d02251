//go:build !linux

package audit

import (
	"errors"
	"fmt"
	"os"
)

// ledgerIdentity is unknown off Linux: RingTail then replays into a
// ledger only what continues a non-empty chain, as Open would.
func ledgerIdentity(*os.File) (walIdentity, error) {
	return walIdentity{}, errors.ErrUnsupported
}

// openRegular opens path for reading, only if it is a regular file.
func openRegular(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		if err == nil {
			err = fmt.Errorf("%s: not a regular file", path)
		}
		return nil, err
	}
	return os.Open(path)
}
