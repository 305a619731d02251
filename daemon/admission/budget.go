package admission

import (
	"math"
	"sync"
	"time"
)

// Limiter keeps the budgets of identities (docs/security.md, "Budgets
// against probing"): per key, a token bucket of calls (rate) and a
// sliding window of denials (denial budget) whose spending locks the key
// out for a window. A key is an identity string: the daemon keys a
// principal as "principal:NAME"; a delegation token will be another key
// ("token:ID") with limits of its own, so a token can never spend its
// minter's budget nor escape it.
//
// Only configured keys have state: a key without limits is admitted
// without a lookup beyond the map, so the memory is bounded by the
// manifest (its principals; a denial budget keeps at most Denials
// timestamps), never by callers. The map's lock is held only to find a
// key; each key has its own, so one identity's calls never wait on
// another's, and no lock is held across a call.
type Limiter struct {
	now func() time.Time

	mu   sync.RWMutex
	keys map[string]*keyBudget
}

// Limits are one key's limits. The zero value limits nothing.
type Limits struct {
	// Rate is calls a second, refilling a bucket of Burst calls; 0: no
	// rate limit.
	Rate  float64
	Burst int
	// Denials denials within Window spend the budget; 0: no budget.
	Denials int
	Window  time.Duration
}

func (l Limits) none() bool { return l.Rate <= 0 && l.Denials <= 0 }

// Refusal is why Admit refused a call.
type Refusal int

const (
	Admitted Refusal = iota
	// RateLimited: the key's bucket is empty.
	RateLimited
	// BudgetExhausted: the key spent its denial budget and is locked out.
	BudgetExhausted
)

// Verdict is Admit's answer: Until is when a refused call may come back
// (the bucket has a token again, or the lockout ends).
type Verdict struct {
	Refused Refusal
	Until   time.Time
}

type keyBudget struct {
	mu  sync.Mutex
	lim Limits

	tokens float64
	filled time.Time // when tokens was last brought up to date

	// denials is a ring of the times of the denials in the window,
	// oldest at head; len(denials) == lim.Denials once first used.
	denials []time.Time
	head, n int
	locked  time.Time // the lockout ends then; zero: none

	rateLimited, exhausted uint64 // refusals, for status and metrics
	spent                  uint64 // times the budget was spent
}

// NewLimiter is a limiter with no keys, on the wall clock.
func NewLimiter() *Limiter { return NewLimiterAt(time.Now) }

// NewLimiterAt is a limiter on the clock now (tests inject a fake).
func NewLimiterAt(now func() time.Time) *Limiter {
	return &Limiter{now: now, keys: map[string]*keyBudget{}}
}

// Configure sets every key's limits at once (a manifest load or reload):
// a key that keeps limits keeps its state, clipped to the new limits; a
// key not in limits, or with none, is forgotten; a new key starts with a
// full bucket and an unspent budget.
func (l *Limiter) Configure(limits map[string]Limits) {
	if l == nil {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.keys {
		if lim, ok := limits[k]; !ok || lim.none() {
			delete(l.keys, k)
		}
	}
	for k, lim := range limits {
		if lim.none() {
			continue
		}
		if lim.Rate > 0 && lim.Burst < 1 {
			lim.Burst = 1
		}
		if b := l.keys[k]; b != nil {
			b.mu.Lock()
			b.reconfigure(lim, now)
			b.mu.Unlock()
			continue
		}
		l.keys[k] = &keyBudget{lim: lim, tokens: float64(lim.Burst), filled: now}
	}
}

// reconfigure clips b's state to new limits; b.mu held.
func (b *keyBudget) reconfigure(lim Limits, now time.Time) {
	old := b.lim
	b.lim = lim
	if lim.Rate <= 0 {
		b.tokens = 0
	} else {
		if old.Rate <= 0 {
			b.tokens, b.filled = float64(lim.Burst), now
		}
		b.refill(now)
	}
	if lim.Denials <= 0 {
		b.denials, b.head, b.n, b.locked = nil, 0, 0, time.Time{}
		return
	}
	// Keep the newest denials, fewer than the new budget (a reload alone
	// never spends it), and a lockout no longer than the new window.
	var kept []time.Time
	for i := 0; i < b.n; i++ {
		kept = append(kept, b.denials[(b.head+i)%len(b.denials)])
	}
	if len(kept) > lim.Denials-1 {
		kept = kept[len(kept)-(lim.Denials-1):]
	}
	b.denials, b.head, b.n = make([]time.Time, lim.Denials), 0, 0
	for _, t := range kept {
		b.push(t)
	}
	if end := now.Add(lim.Window); b.locked.After(end) {
		b.locked = end
	}
}

func (l *Limiter) get(key string) *keyBudget {
	if l == nil {
		return nil
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.keys[key]
}

// Admit says whether key may make a call now. A key locked out is
// refused BudgetExhausted without touching its bucket; else a call takes
// a token, or is refused RateLimited. Neither refusal counts as a denial
// (the caller does not report it to Denied): retrying while refused never
// extends a lockout.
func (l *Limiter) Admit(key string) Verdict {
	b := l.get(key)
	if b == nil {
		return Verdict{}
	}
	now := l.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lim.Denials > 0 && now.Before(b.locked) {
		b.exhausted++
		return Verdict{Refused: BudgetExhausted, Until: b.locked}
	}
	if b.lim.Rate <= 0 {
		return Verdict{}
	}
	b.refill(now)
	if b.tokens < 1 {
		b.rateLimited++
		wait := time.Duration((1 - b.tokens) / b.lim.Rate * float64(time.Second))
		return Verdict{Refused: RateLimited, Until: now.Add(wait)}
	}
	b.tokens--
	return Verdict{}
}

// refill brings the bucket up to now; b.mu held. A clock that went back
// adds nothing.
func (b *keyBudget) refill(now time.Time) {
	if d := now.Sub(b.filled); d > 0 {
		b.tokens = math.Min(float64(b.lim.Burst), b.tokens+d.Seconds()*b.lim.Rate)
	}
	b.filled = now
}

// Denied counts a denial of key's. When it spends the budget (Denials
// within the last Window), the key is locked out until the returned time
// and its window starts empty; spent is false otherwise. A denial while
// locked out (a call admitted just before the lockout began) is not
// counted.
func (l *Limiter) Denied(key string) (spent bool, until time.Time) {
	b := l.get(key)
	if b == nil {
		return false, time.Time{}
	}
	now := l.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lim.Denials <= 0 || now.Before(b.locked) {
		return false, time.Time{}
	}
	if b.denials == nil {
		b.denials = make([]time.Time, b.lim.Denials)
	}
	b.expire(now)
	b.push(now)
	if b.n < b.lim.Denials {
		return false, time.Time{}
	}
	b.head, b.n = 0, 0
	b.locked = now.Add(b.lim.Window)
	b.spent++
	return true, b.locked
}

// expire drops the denials older than the window; b.mu held.
func (b *keyBudget) expire(now time.Time) {
	for b.n > 0 && now.Sub(b.denials[b.head]) >= b.lim.Window {
		b.head = (b.head + 1) % len(b.denials)
		b.n--
	}
}

// push adds a denial at t; b.mu held, room left (n < len).
func (b *keyBudget) push(t time.Time) {
	b.denials[(b.head+b.n)%len(b.denials)] = t
	b.n++
}

// Reset gives key its whole budget back (an approver's reset): no
// denials in the window, no lockout, a full bucket. ok is false for a
// key without limits. It returns what it cleared.
func (l *Limiter) Reset(key string) (was State, ok bool) {
	b := l.get(key)
	if b == nil {
		return State{}, false
	}
	now := l.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	was = b.state(now)
	b.head, b.n, b.locked = 0, 0, time.Time{}
	b.tokens, b.filled = float64(b.lim.Burst), now
	return was, true
}

// State is a key's budgets now, for status and metrics.
type State struct {
	Limits Limits
	// Tokens is the calls the bucket holds now (rate only).
	Tokens float64
	// InWindow is the denials counted in the window now; LockedUntil,
	// when not zero, is when the lockout ends.
	InWindow    int
	LockedUntil time.Time
	// RateLimited and Exhausted count the calls refused so far; Spent
	// the times the budget was spent.
	RateLimited, Exhausted, Spent uint64
}

// state is b's state at now; b.mu held.
func (b *keyBudget) state(now time.Time) State {
	s := State{Limits: b.lim, RateLimited: b.rateLimited, Exhausted: b.exhausted, Spent: b.spent}
	if b.lim.Rate > 0 {
		b.refill(now)
		s.Tokens = b.tokens
	}
	if b.lim.Denials > 0 {
		if b.denials != nil {
			b.expire(now)
		}
		s.InWindow = b.n
		if now.Before(b.locked) {
			s.LockedUntil = b.locked
		}
	}
	return s
}

// State is key's state now; ok is false for a key without limits.
func (l *Limiter) State(key string) (State, bool) {
	b := l.get(key)
	if b == nil {
		return State{}, false
	}
	now := l.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state(now), true
}

// Keys are the keys with limits.
func (l *Limiter) Keys() []string {
	if l == nil {
		return nil
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]string, 0, len(l.keys))
	for k := range l.keys {
		out = append(out, k)
	}
	return out
}
