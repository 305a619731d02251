package testutil

import (
	"context"
	"sync"
	"testing"
)

// Start runs a daemon in-process for a test: run (a daemon's Run, given
// the context to stop it with and the func its Config calls once it is
// listening) runs in a goroutine of its own, and Start returns once run
// has called ready. A run that returns first fails the test. The stop it
// returns cancels run's context, waits for run to return and reports the
// error it returned; it may be called more than once.
func Start(tb testing.TB, run func(ctx context.Context, ready func()) error) (stop func()) {
	tb.Helper()
	ready := make(chan struct{})
	var readyOnce sync.Once
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, func() { readyOnce.Do(func() { close(ready) }) }) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		tb.Fatalf("daemon did not start: %v", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("daemon: %v", err)
			}
		})
	}
}
