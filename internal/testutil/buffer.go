package testutil

import (
	"bytes"
	"sync"
)

// LockedBuffer is a bytes.Buffer that one goroutine may write while
// another reads it: a daemon's log sink or a child's stderr, read by the
// test while the writer still runs. Write and String hold its lock; the
// embedded Buffer's other methods do not, so use them only once the
// writer is done.
type LockedBuffer struct {
	mu sync.Mutex
	bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.Write(p)
}

// String may be read while the writer still writes.
func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.String()
}
