package cli

import (
	"flag"
	"fmt"
)

const cacheHelp = `Usage: sluice cache clear TOOL

Drop the caches of execute tool TOOL (its manifest's "cache" paths): your
own, or, for an approver principal, every principal's. The next call of
TOOL starts with empty caches; a call running now keeps the cache it has
until it ends. Caches live in memory (a size-capped tmpfs per tool,
principal and path, cache_mb each) while sluiced runs; a restart empties
them too.
`

func (e *env) cache(args []string) int {
	if len(args) == 0 || args[0] != "clear" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(e.stdout, cacheHelp)
			return ExitOK
		}
		fmt.Fprint(e.stderr, cacheHelp)
		return ExitUsage
	}
	fs := flag.NewFlagSet("cache clear", flag.ContinueOnError)
	pos, code, ok := e.parse(fs, args[1:], cacheHelp)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprint(e.stderr, cacheHelp)
		return ExitUsage
	}
	c := e.client()
	defer c.Close()
	r, err := c.ClearCache(e.ctx, pos[0])
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice: %v\n", err)
		return ExitFailed
	}
	whose := "your"
	if r.AllPrincipals {
		whose = "every principal's"
	}
	fmt.Fprintf(e.stdout, "cleared %s caches of %s: %d dropped\n", whose, r.Tool, r.Cleared)
	return ExitOK
}
