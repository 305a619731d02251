//go:build linux

package daemon

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/daemon/admission"
)

// Budgets and rate limits (docs/design.md §11; docs/security.md, "Budgets
// against probing"). A principal's rate and denial_budget are kept by
// admission.Limiter, keyed by identity: a principal is
// "principal:NAME", a delegation token "token:ID" (tokenKey).
//
// A call is admitted (call.limited) right after its peer is identified,
// before anything resolves or runs: a refused call costs its decision
// record and nothing else. A denial that counts (budgetCounts) is
// reported to the limiter before its record is written (call.countDenial).
// The limiter holds a lock per principal, never one across calls, so one
// principal's budget never slows another.

// principalKey is a principal's key in the limiter.
func principalKey(name string) string { return "principal:" + name }

// tokenKey is a delegation token's key: a call made with a token is
// admitted and counted against the token, with its minter's limits, and
// not against the minter's own calls (docs/manifest.md, "Budgets and rate
// limits"): a sub-agent probing the tree locks out itself, not its
// parent, and a token cannot mint tokens to multiply its budget.
func tokenKey(id string) string { return "token:" + id }

// mintedKey is the budget every token of a minter shares, beside each
// token's own, with the minter's limits: without it an agent whose
// budget is spent would mint a token (or revoke one and mint another)
// for a fresh budget, and probe on. It is kept for every principal with
// a budget, token or none, so that revoking every token forgets nothing.
func mintedKey(minter string) string { return "tokens:" + minter }

// budgetKey is the key a call is admitted and counted against, and how
// its rule and detail name it.
func (c *call) budgetKey() string {
	if id := c.tokenID(); id != "" {
		return tokenKey(id)
	}
	return principalKey(c.areq.Principal)
}

// budgetWho names, in a refusal's detail, whose budget key is: the
// call's token or principal, or the tokens its principal minted. Built
// only for a refusal, never on an admitted call's path.
func (c *call) budgetWho(key string) string {
	switch name := c.areq.Principal; key {
	case mintedKey(name):
		return "the tokens of principal " + name
	case principalKey(name):
		return "principal " + name
	}
	return "token " + c.tokenID() + " (of principal " + c.areq.Principal + ")"
}

// denialBudget says a principal's denial budget, with its figures when
// the manifest has them.
func denialBudget(m *authz.Manifest, name string) string {
	if _, b := m.Budgets(name); b != nil {
		return fmt.Sprintf("its denial budget (%d denials within %d s)", b.Denials, b.WindowS)
	}
	return "its denial budget"
}

// budgetLimits is the limits of every principal with a budget in m. The
// default principal "local" (no principals declared) has none.
func budgetLimits(m *authz.Manifest) map[string]admission.Limits {
	out := map[string]admission.Limits{}
	for name := range m.Principals {
		r, b := m.Budgets(name)
		var lim admission.Limits
		if r != nil {
			lim.Rate, lim.Burst = r.PerSecond, r.EffectiveBurst()
		}
		if b != nil {
			lim.Denials, lim.Window = b.Denials, time.Duration(b.WindowS)*time.Second
		}
		if r != nil || b != nil {
			out[principalKey(name)] = lim
			out[mintedKey(name)] = lim
		}
	}
	return out
}

// budgetCounts are the denials that spend a denial budget: the policy
// refusing what the caller asked for, which is what a model probing the
// tree, the tools or the network gets. Not counted: a human's decision
// (approval_denied, approval_expired), an operator's (task_cancelled),
// the daemon's state (busy, audit_unavailable, shutdown), a size cap
// (limit_exceeded), and the limiter's own refusals (rate_limited,
// budget_exhausted), so that retrying while refused never extends a
// lockout. An allowed call that fails as it runs (verdict allow) is not a
// denial.
var budgetCounts = map[api.Reason]bool{
	api.ReasonUnknownTool: true, api.ReasonPrincipalNotAllowed: true, api.ReasonInvalidArgs: true,
	api.ReasonInvalidPath: true, api.ReasonOutsideRoots: true, api.ReasonNeverListed: true,
	api.ReasonNotFound: true, api.ReasonNotAFile: true, api.ReasonNotADirectory: true,
	api.ReasonUnsupportedFileType: true, api.ReasonCommandNotAllowed: true, api.ReasonEgressDenied: true,
	api.ReasonTokenInvalid: true,
}

// limited asks the limiter whether the call's principal may call now;
// when not, the call is denied rate_limited or budget_exhausted, with a
// detail that says when it frees up, and limited returns true.
func (c *call) limited() bool {
	name := c.areq.Principal
	if name == "" {
		return false // a peer mapped to no principal: denied anyway, its records rate limited (ratelimit.go)
	}
	key := c.budgetKey()
	v := c.d.budgets.Admit(key)
	if v.Refused == admission.Admitted && c.tokenID() != "" {
		// And the budget the minter's tokens share.
		if v = c.d.budgets.Admit(mintedKey(name)); v.Refused != admission.Admitted {
			key = mintedKey(name)
		}
	}
	switch v.Refused {
	case admission.RateLimited:
		c.dec = authz.Decision{Verdict: api.VerdictDeny, Reason: api.ReasonRateLimited, Rule: "principals." + name + ".rate"}
		limit := "its rate"
		if r, _ := c.p.m.Budgets(name); r != nil {
			limit = r.String()
		}
		c.limitDetail = fmt.Sprintf("%s is over %s; retry at %s", c.budgetWho(key), limit, stamp(v.Until))
	case admission.BudgetExhausted:
		c.dec = authz.Decision{Verdict: api.VerdictDeny, Reason: api.ReasonBudgetExhausted, Rule: "principals." + name + ".denial_budget"}
		c.limitDetail = fmt.Sprintf("%s spent %s: every call is refused until %s, or until an approver resets it (sluice budget reset %s)",
			c.budgetWho(key), denialBudget(c.p.m, name), stamp(v.Until), strings.TrimPrefix(key, "principal:"))
	default:
		return false
	}
	return true
}

// finishLimited records a call the limiter refused and answers it.
func (c *call) finishLimited(em emitter) {
	c.d.m.decided(c)
	seq, err := c.auditDecision()
	if err != nil {
		c.failClosed()
		seq = 0
	}
	c.finishDenied(em, seq)
}

// countDenial reports a denial that spends a budget (budgetCounts) to
// the limiter, before its record is written; when it spends the budget,
// the record and the caller are told so.
func (c *call) countDenial() {
	name := c.areq.Principal
	if name == "" || c.dec.Allowed() || c.dec.Pending() || !budgetCounts[c.dec.Reason] {
		return
	}
	key := c.budgetKey()
	spent, until := c.d.budgets.Denied(key)
	if c.tokenID() != "" {
		// Counted in the budget the minter's tokens share too.
		if s, u := c.d.budgets.Denied(mintedKey(name)); s && !spent {
			spent, until, key = true, u, mintedKey(name)
		}
	}
	if !spent {
		return
	}
	c.limitDetail = fmt.Sprintf("this denial spent %s's %s: every call is refused budget_exhausted until %s, or until an approver resets it",
		c.budgetWho(key), strings.TrimPrefix(denialBudget(c.p.m, name), "its "), stamp(until))
	c.d.log.Warn("denial budget spent: the principal's calls are refused until the window passes or an approver resets it",
		"principal", name, "until", stamp(until), "call_id", c.id, "reason", c.dec.Reason)
}

// stamp is a time as the budgets say it: RFC 3339, UTC, milliseconds.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// configureBudgets gives the limiter the budgets of the manifest in force
// (at start, and after each reload: counts of principals that keep a
// budget are kept; see admission.Limiter.Configure).
func (d *Daemon) configureBudgets(m *authz.Manifest) {
	limits := budgetLimits(m)
	// Each live token has its minter's limits, under its own key.
	for _, t := range d.tokens.list("", true) {
		if lim, ok := limits[principalKey(t.Minter)]; ok {
			limits[tokenKey(t.ID)] = lim
		}
	}
	d.budgets.Configure(limits)
}

// tokensChanged gives a token minted or revoked its budget or takes it
// away, under the manifest in force.
func (d *Daemon) tokensChanged() {
	d.reloadMu.Lock() // one configuration at a time, after a reload's own
	defer d.reloadMu.Unlock()
	p := d.acquire()
	defer p.release()
	d.configureBudgets(p.m)
}

// handleBudgetReset is POST /v1/budgets/{principal}/reset: an approver
// gives a principal its whole budget back (no denials in the window, no
// lockout, a full bucket). Anyone else gets 403; a principal with no
// budget, 404. The reset is recorded, durably, before it happens.
func (d *Daemon) handleBudgetReset(w http.ResponseWriter, _ *http.Request, peer Peer, principal string) {
	p := d.acquire()
	name, _ := p.m.Identify(callerOf(peer))
	approver := p.m.IsApprover(name, peer.UID)
	version := p.m.Version
	p.release()
	if !approver {
		writeError(w, http.StatusForbidden, api.ErrForbidden, "only an approver principal may reset a budget")
		return
	}
	key, shared := principalKey(principal), ""
	if id, ok := strings.CutPrefix(principal, "token:"); ok {
		key = tokenKey(id) // a delegation token's own budget
		// and the one its minter's tokens share: the approver means the
		// token to go on.
		if minter := d.tokens.minterOf(id); minter != "" {
			shared = mintedKey(minter)
		}
	} else if minter, ok := strings.CutPrefix(principal, "tokens:"); ok {
		key = mintedKey(minter) // the budget a minter's tokens share
	}
	if _, ok := d.budgets.State(key); !ok {
		writeError(w, http.StatusNotFound, api.ErrNotFound, "principal "+strconv.Quote(principal)+" has no rate or denial_budget in the manifest")
		return
	}
	detail := "budgets of principal " + principal + " reset"
	if shared != "" {
		detail += " (and " + shared + ", which its minter's tokens share)"
	}
	seq, err := d.ledger.Append(&audit.Record{Kind: audit.KindBudgetReset, PolicyVersion: version,
		Detail:    detail,
		Principal: &audit.Principal{Name: name, UID: peer.UID, GID: peer.GID, PID: peer.PID}})
	if err == nil {
		err = d.ledger.Sync(seq)
	}
	if err != nil {
		d.log.Error("audit budget_reset failed; not resetting", "err", err, "principal", principal)
		writeError(w, http.StatusServiceUnavailable, api.ErrUnavailable, "the audit ledger cannot be written; the budget was not reset")
		return
	}
	was, ok := d.budgets.Reset(key)
	if shared != "" {
		d.budgets.Reset(shared)
	}
	if !ok { // a reload took its budget away meanwhile: nothing left to reset
		writeError(w, http.StatusNotFound, api.ErrNotFound, "principal "+strconv.Quote(principal)+" has no rate or denial_budget in the manifest")
		return
	}
	out := api.BudgetReset{Principal: principal, Cleared: was.InWindow}
	if !was.LockedUntil.IsZero() {
		out.ExhaustedUntil = stamp(was.LockedUntil)
	}
	d.log.Info("budget reset", "principal", principal, "by", name, "cleared", was.InWindow, "was_exhausted_until", out.ExhaustedUntil)
	writeJSON(w, http.StatusOK, out)
}

// budgetStatus is the budgets GET /v1/status shows: the principal's own,
// or every principal's for an approver, by name; with tokens, an
// approver's view also has each live token's ("token:ID").
func (d *Daemon) budgetStatus(name string, all, tokens bool) []api.StatusBudget {
	var out []api.StatusBudget
	var minters map[string]bool // with live tokens
	if all && tokens {
		minters = map[string]bool{}
		for _, t := range d.tokens.list("", true) {
			minters[t.Minter] = true
		}
	}
	for _, key := range d.budgets.Keys() {
		principal, ok := strings.CutPrefix(key, "principal:")
		if !ok && all && tokens && (strings.HasPrefix(key, "token:") || strings.HasPrefix(key, "tokens:")) {
			principal, ok = key, true
		}
		if !ok || (!all && principal != name) {
			continue
		}
		s, ok := d.budgets.State(key)
		if !ok {
			continue
		}
		if minter, shared := strings.CutPrefix(key, "tokens:"); shared && !minters[minter] && s.InWindow == 0 && s.LockedUntil.IsZero() {
			continue // kept for every principal with a budget; shown when its tokens have used it
		}
		out = append(out, statusBudget(principal, s))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Principal < out[j].Principal })
	return out
}

func statusBudget(principal string, s admission.State) api.StatusBudget {
	sb := api.StatusBudget{Principal: principal, RateLimited: s.RateLimited, BudgetExhausted: s.Exhausted}
	if s.Limits.Rate > 0 {
		sb.Rate = &api.StatusRate{PerSecond: s.Limits.Rate, Burst: s.Limits.Burst, Available: float64(int64(s.Tokens*1000)) / 1000}
	}
	if s.Limits.Denials > 0 {
		sb.DenialBudget = &api.StatusDenialBudget{Denials: s.Limits.Denials, WindowS: int(s.Limits.Window / time.Second),
			Spent: s.InWindow, TimesSpent: s.Spent}
		if !s.LockedUntil.IsZero() {
			sb.DenialBudget.ExhaustedUntil = stamp(s.LockedUntil)
		}
	}
	return sb
}

// budgetCollector reports the budgets at each scrape, per principal: the
// refusals so far (counters) and the denials in the window and whether
// the budget is spent now (gauges).
type budgetCollector struct{ d *Daemon }

var (
	rateLimitedDesc = prometheus.NewDesc("sluice_rate_limited_total",
		"Calls refused rate_limited, by principal (manifest \"rate\").", []string{"principal"}, nil)
	budgetExhaustedDesc = prometheus.NewDesc("sluice_budget_exhausted_total",
		"Calls refused budget_exhausted, by principal (manifest \"denial_budget\").", []string{"principal"}, nil)
	budgetDenialsDesc = prometheus.NewDesc("sluice_budget_denials",
		"Denials counted in a principal's denial_budget window now.", []string{"principal"}, nil)
	budgetSpentDesc = prometheus.NewDesc("sluice_budget_spent",
		"1 while a principal's denial_budget is spent (its calls are refused budget_exhausted), else 0.", []string{"principal"}, nil)
)

func (b *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{rateLimitedDesc, budgetExhaustedDesc, budgetDenialsDesc, budgetSpentDesc} {
		ch <- d
	}
}

func (b *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	for _, sb := range b.d.budgetStatus("", true, false) { // per principal: a token would be a label per mint
		if sb.Rate != nil {
			ch <- prometheus.MustNewConstMetric(rateLimitedDesc, prometheus.CounterValue, float64(sb.RateLimited), sb.Principal)
		}
		if db := sb.DenialBudget; db != nil {
			ch <- prometheus.MustNewConstMetric(budgetExhaustedDesc, prometheus.CounterValue, float64(sb.BudgetExhausted), sb.Principal)
			ch <- prometheus.MustNewConstMetric(budgetDenialsDesc, prometheus.GaugeValue, float64(db.Spent), sb.Principal)
			spent := 0.0
			if db.ExhaustedUntil != "" {
				spent = 1
			}
			ch <- prometheus.MustNewConstMetric(budgetSpentDesc, prometheus.GaugeValue, spent, sb.Principal)
		}
	}
}
