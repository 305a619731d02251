//go:build linux

package main

import (
	"fmt"
	"time"
)

// goal is one row of the goals table printed at the end of a run: what
// was measured, stated the way its goal is (a ratio or a value), and
// whether this run met it. Rows with no goal (shown for context) have
// goal "" and are printed as "—".
type goal struct {
	row, measured, goal string
	met                 bool
}

var goals []goal

func addGoal(row, measured, want string, met bool) {
	goals = append(goals, goal{row, measured, want, met})
}

// ratioGoal adds a row whose goal is a ratio a/b ≤ max.
func ratioGoal(row string, a, b time.Duration, of string, max float64) {
	r := float64(a) / float64(b)
	addGoal(row, fmt.Sprintf("%.2f× %s (%.2f ms vs %.2f ms)", r, of, ms(a), ms(b)), fmt.Sprintf("≤ %.1f× %s", max, of), r <= max)
}

// infoRow adds a row with no goal, for context.
func infoRow(row, measured string) { addGoal(row, measured, "", false) }

// printGoals prints the goals table in Markdown (readable as text too).
func printGoals(note string) {
	if len(goals) == 0 {
		return
	}
	fmt.Printf("\ngoals (%s)\n\n", note)
	fmt.Printf("| row | measured | goal | |\n| --- | --- | --- | --- |\n")
	met, all := 0, 0
	for _, g := range goals {
		verdict := "—"
		if g.goal != "" {
			all++
			verdict = "MISS"
			if g.met {
				met++
				verdict = "PASS"
			}
		} else {
			g.goal = "—"
		}
		fmt.Printf("| %s | %s | %s | %s |\n", mdEscape(g.row), g.measured, g.goal, verdict)
	}
	fmt.Printf("\n%d of %d goals met in this run.\n", met, all)
}
