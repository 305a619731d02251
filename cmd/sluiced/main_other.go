//go:build !linux

package main

import (
	"fmt"
	"os"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/daemon"
)

// sluiced runs only on Linux (main_linux.go); elsewhere it says so and
// exits 1, so that "go build ./..." works on every platform.
func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println("sluiced", api.BuildVersion())
		return
	}
	fmt.Fprintf(os.Stderr, "sluiced: %v\n", daemon.ErrUnsupported)
	os.Exit(1)
}
