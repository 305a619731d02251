package authz

import (
	"fmt"
	"math"
)

// A principal's budgets (docs/manifest.md, "Budgets and rate limits";
// docs/security.md, "Budgets against probing"): how fast it may call
// (rate, a token bucket) and how many of its calls may be denied in a
// window before every call of its is refused budget_exhausted
// (denial_budget, the answer to a model probing the directory tree).
// The manifest only states them; the daemon keeps the counts
// (daemon/admission.Limiter), so authz stays a pure function of the
// manifest and replay re-decides without them.

// Rate is a principal's call rate: a token bucket of Burst calls that
// refills at PerSecond calls a second.
type Rate struct {
	PerSecond float64 `json:"per_second" toml:"per_second"`
	// Burst is how many calls may come back to back; 0 in the manifest
	// (absent): PerSecond rounded up, at least 1 (see EffectiveBurst).
	Burst int `json:"burst,omitempty" toml:"burst"`
}

// DenialBudget is how many denials a principal may have within a sliding
// window of WindowS seconds: the one that spends it starts a lockout of
// WindowS seconds in which its every call is budget_exhausted.
type DenialBudget struct {
	Denials int `json:"denials" toml:"denials"`
	WindowS int `json:"window_s" toml:"window_s"`
}

// Bounds on budgets: a rate faster than the daemon can answer limits
// nothing, and the denials of a window are kept one timestamp each.
const (
	maxRatePerSecond = 1e6
	maxBurst         = 1_000_000
	// MaxBudgetDenials bounds denial_budget.denials: the daemon keeps a
	// timestamp per denial in the window (8 bytes each, per principal).
	MaxBudgetDenials = 10_000
	maxBudgetWindowS = 7 * 24 * 3600
)

// EffectiveBurst is burst with its default applied: per_second rounded
// up, at least 1.
func (r *Rate) EffectiveBurst() int {
	if r.Burst > 0 {
		return r.Burst
	}
	return max(1, int(math.Ceil(r.PerSecond)))
}

// Budgets is the named principal's rate and denial budget (nil where it
// has none). The default principal "local" (no principals declared) has
// neither.
func (m *Manifest) Budgets(principal string) (*Rate, *DenialBudget) {
	p := m.Principals[principal]
	if p == nil {
		return nil, nil
	}
	return p.Rate, p.DenialBudget
}

func validateBudgets(m *Manifest) error {
	for _, name := range sortedKeys(m.Principals) {
		p := m.Principals[name]
		key := "principals." + name
		if r := p.Rate; r != nil {
			if math.IsNaN(r.PerSecond) || r.PerSecond <= 0 || r.PerSecond > maxRatePerSecond {
				return merr(key+".rate.per_second", "is %v; use a number of calls per second above 0 and at most %d, e.g. 5 or 0.5", r.PerSecond, int(maxRatePerSecond))
			}
			if r.Burst < 0 || r.Burst > maxBurst {
				return merr(key+".rate.burst", "is %d; use 1 to %d calls (default: per_second rounded up)", r.Burst, maxBurst)
			}
		}
		if b := p.DenialBudget; b != nil {
			if b.Denials < 1 || b.Denials > MaxBudgetDenials {
				return merr(key+".denial_budget.denials", "is %d; use 1 to %d denials, e.g. 20", b.Denials, MaxBudgetDenials)
			}
			if b.WindowS < 1 || b.WindowS > maxBudgetWindowS {
				return merr(key+".denial_budget.window_s", "is %d; use 1 to %d seconds, e.g. 300", b.WindowS, maxBudgetWindowS)
			}
		}
	}
	return nil
}

// String is how a rate is said in a detail: "5/s, burst 10".
func (r *Rate) String() string {
	return fmt.Sprintf("%g/s, burst %d", r.PerSecond, r.EffectiveBurst())
}
