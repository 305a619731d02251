package testutil

import "github.com/hanwen/go-fuse/v2/splice"

// go-fuse splices a read's data through a pipe pair when the kernel has
// no FUSE passthrough (before Linux 6.9; Debian 12's 6.1): it keeps the
// pairs in a process-wide pool, and empties each into one /dev/null fd
// it opens on first use and never closes. Neither is a test's leak.
//
// spliceBaseline opens that /dev/null fd before the leak check's
// baseline (a pair taken and given back); spliceRelease closes the
// pool's pairs before the check.
func spliceBaseline() {
	if p, err := splice.Get(); err == nil {
		splice.Done(p)
	}
}

func spliceRelease() { splice.ClearSplicePool() }
