// Command sluice is the CLI for sluiced: calls, tools, reloads and the
// audit ledger. All behaviour lives in package cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/cmd/sluice/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
