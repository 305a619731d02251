package api

// StatusBudget is one principal's budgets in GET /v1/status
// (docs/api.md, "Budgets"): its limits from the manifest and what it has
// spent of them now.
type StatusBudget struct {
	Principal string `json:"principal"`
	// Rate is the principal's call rate, nil when it has none.
	Rate *StatusRate `json:"rate,omitempty"`
	// DenialBudget is its denial budget, nil when it has none.
	DenialBudget *StatusDenialBudget `json:"denial_budget,omitempty"`
	// RateLimited and BudgetExhausted count the calls refused so far
	// (since sluiced started; a reload keeps them).
	RateLimited     uint64 `json:"rate_limited"`
	BudgetExhausted uint64 `json:"budget_exhausted"`
}

// StatusRate is a token bucket: PerSecond calls a second, Burst back to
// back, Available in the bucket now.
type StatusRate struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
	Available float64 `json:"available"`
}

// StatusDenialBudget is a denial budget: Denials within WindowS seconds
// spend it. Spent is the denials counted in the window now; while the
// budget is spent, ExhaustedUntil (RFC 3339) is when the lockout ends.
type StatusDenialBudget struct {
	Denials        int    `json:"denials"`
	WindowS        int    `json:"window_s"`
	Spent          int    `json:"spent"`
	ExhaustedUntil string `json:"exhausted_until,omitempty"`
	// TimesSpent counts the lockouts so far.
	TimesSpent uint64 `json:"times_spent"`
}

// BudgetReset answers POST /v1/budgets/{principal}/reset: what the reset
// cleared (the denials in the window, and when the lockout would have
// ended, if one was on).
type BudgetReset struct {
	Principal      string `json:"principal"`
	Cleared        int    `json:"cleared"`
	ExhaustedUntil string `json:"exhausted_until,omitempty"`
}
