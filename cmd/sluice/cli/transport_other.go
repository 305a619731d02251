//go:build !unix

package cli

import "errors"

// statFile has no owner or mode to read here: the hint falls back to
// its general advice.
func statFile(string) (fileStat, error) {
	return fileStat{}, errors.ErrUnsupported
}
