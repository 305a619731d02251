//go:build linux

package daemon

import "github.com/sluicehq/sluice/internal/udiff"

// unifiedDiff renders old → new for an approver (see udiff.Unified).
func unifiedDiff(oldName, newName, old, new string) (diff string, truncated, tooLarge bool) {
	return udiff.Unified(oldName, newName, old, new)
}
