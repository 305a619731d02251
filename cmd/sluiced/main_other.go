//go:build !linux

package main

import (
	"fmt"
	"os"

	"github.com/sluicehq/sluice/daemon"
)

// sluiced runs only on Linux (main_linux.go); elsewhere it says so and
// exits 1, so that "go build ./..." works on every platform.
func main() {
	fmt.Fprintf(os.Stderr, "sluiced: %v\n", daemon.ErrUnsupported)
	os.Exit(1)
}
