//go:build !linux

package walk

import (
	"context"
	"os"
)

// Search is Linux-only (openat2); see walk_linux.go.
func Search(ctx context.Context, dir *os.File, q Query, o Options) (*Result, error) {
	return nil, ErrNotSupported
}

// Tree is Linux-only (openat2); see walk_linux.go.
func Tree(ctx context.Context, dir *os.File, depth int, sizes bool, o Options) (*Result, error) {
	return nil, ErrNotSupported
}
