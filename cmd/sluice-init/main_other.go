//go:build !linux

package main

import (
	"fmt"
	"os"
)

// sluice-init is a Linux container's init (main_linux.go); elsewhere it
// says so and exits 1, so that "go build ./..." works on every platform.
func main() {
	fmt.Fprintln(os.Stderr, "sluice-init: Linux only")
	os.Exit(1)
}
