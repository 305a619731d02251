package cli

import (
	"fmt"
	"io"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/termsafe"
)

// printChangeset tells what a command with writes changed (docs/manifest.md,
// `writes`): whether its changeset committed, then each change, with why a
// refused one refused it. Paths are the command's to choose: escaped.
func printChangeset(w io.Writer, res *api.CallResult) {
	if res.Committed == nil {
		return
	}
	state := "committed"
	if !*res.Committed {
		state = "not committed"
	}
	fmt.Fprintf(w, "sluice: changeset %s: %d change(s)", state, len(res.Changes))
	if res.Dropped > 0 {
		fmt.Fprintf(w, ", %d path(s) dropped (not in keep)", res.Dropped)
	}
	fmt.Fprintln(w)
	for _, c := range res.Changes {
		p, _ := termsafe.Escape(c.Path, false)
		line := fmt.Sprintf("  %-7s %s", c.Action, p)
		if c.Action == "create" || c.Action == "modify" {
			line += fmt.Sprintf(" (%d bytes)", c.Bytes)
		}
		if c.Committed {
			line += " ✓"
		}
		if c.Reason != "" {
			line += " — " + string(c.Reason)
			if c.Detail != "" {
				d, _ := termsafe.Escape(c.Detail, false)
				line += ": " + d
			}
			if c.Rule != "" {
				line += " (" + c.Rule + ")"
			}
		}
		fmt.Fprintln(w, line)
	}
}
