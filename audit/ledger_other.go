//go:build !linux

package audit

import "fmt"

// Ledger is the ledger writer. It needs Linux (flock, fallocate,
// fdatasync), so on this platform Open refuses with ErrUnsupported; Read,
// Check and ReadAnchor work everywhere.
type Ledger struct{}

// Open is OpenWith with the default Options.
func Open(path string) (*Ledger, Recovery, error) { return OpenWith(path, Options{}) }

// OpenWith refuses: the writer needs Linux.
func OpenWith(path string, opts Options) (*Ledger, Recovery, error) {
	return nil, Recovery{}, fmt.Errorf("open %s: %w", path, ErrUnsupported)
}
