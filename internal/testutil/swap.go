package testutil

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Swapper is the loop a race test runs against the code under test: one
// goroutine doing a swap (a rename exchange, a symlink put in a
// directory's place and back) over and over while the test's callers
// resolve through it.
type Swapper struct {
	stop  atomic.Bool
	swaps atomic.Int64
	err   error // step's error, read after done
	done  chan struct{}
	once  sync.Once
}

// Swap runs step(0), step(1), … in a goroutine of its own until Stop is
// called or step fails. Each step that returns nil counts as one swap.
// The loop is stopped when the test ends, if the test has not stopped it.
func Swap(t testing.TB, step func(i int) error) *Swapper {
	s := &Swapper{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for i := 0; !s.stop.Load(); i++ {
			if err := step(i); err != nil {
				s.err = err
				return
			}
			s.swaps.Add(1)
		}
	}()
	t.Cleanup(func() { s.Stop() })
	return s
}

// Swaps is how many swaps the loop has done so far.
func (s *Swapper) Swaps() int64 { return s.swaps.Load() }

// Stop ends the loop, waits for it and returns the error that ended it
// early, if any. It may be called more than once.
func (s *Swapper) Stop() error {
	s.once.Do(func() { s.stop.Store(true) })
	<-s.done
	return s.err
}
