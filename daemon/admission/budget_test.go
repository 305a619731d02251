package admission

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock the test moves by hand: no test here sleeps.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newFake() (*Limiter, *fakeClock) {
	c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	return NewLimiterAt(c.now), c
}

// TestRateBucket: burst calls back to back, the next is refused with the
// time a token comes back, and the bucket refills with the clock (never
// past its burst).
func TestRateBucket(t *testing.T) {
	l, clk := newFake()
	l.Configure(map[string]Limits{"principal:a": {Rate: 2, Burst: 3}})
	for i := range 3 {
		if v := l.Admit("principal:a"); v.Refused != Admitted {
			t.Fatalf("call %d: %+v", i, v)
		}
	}
	v := l.Admit("principal:a")
	if v.Refused != RateLimited || !v.Until.Equal(clk.now().Add(500*time.Millisecond)) {
		t.Fatalf("the burst+1st call: %+v, want rate limited until +500ms", v)
	}
	// Half a token: still refused, and it says when the rest comes.
	clk.advance(250 * time.Millisecond)
	if v := l.Admit("principal:a"); v.Refused != RateLimited || !v.Until.Equal(clk.now().Add(250*time.Millisecond)) {
		t.Fatalf("after 250ms: %+v", v)
	}
	clk.advance(250 * time.Millisecond)
	if v := l.Admit("principal:a"); v.Refused != Admitted {
		t.Fatalf("after 500ms: %+v", v)
	}
	if v := l.Admit("principal:a"); v.Refused != RateLimited {
		t.Fatalf("the token was taken: %+v", v)
	}
	// An hour idle fills the bucket to its burst, not beyond.
	clk.advance(time.Hour)
	for i := range 3 {
		if v := l.Admit("principal:a"); v.Refused != Admitted {
			t.Fatalf("after an hour, call %d: %+v", i, v)
		}
	}
	if v := l.Admit("principal:a"); v.Refused != RateLimited {
		t.Fatalf("after an hour, the 4th call: %+v", v)
	}
	if s, _ := l.State("principal:a"); s.RateLimited != 4 {
		t.Errorf("refusals counted: %+v", s)
	}
	// A clock that goes back adds no tokens.
	clk.advance(-time.Minute)
	if v := l.Admit("principal:a"); v.Refused != RateLimited {
		t.Fatalf("a clock gone back: %+v", v)
	}
	// Another key, and a key without limits, are never slowed.
	if v := l.Admit("principal:b"); v.Refused != Admitted {
		t.Fatalf("an unconfigured key: %+v", v)
	}
}

// TestDenialBudget: N denials within the sliding window spend it and lock
// the key out for a window; refusals while locked do not count (retrying
// never extends the lockout); the window slides; a reset restores it.
func TestDenialBudget(t *testing.T) {
	l, clk := newFake()
	l.Configure(map[string]Limits{"principal:p": {Denials: 3, Window: time.Minute}, "principal:q": {Denials: 3, Window: time.Minute}})
	deny := func(key string) (bool, time.Time) { return l.Denied(key) }

	// Two denials, then 60 s: they slide out; two more do not spend it.
	deny("principal:p")
	clk.advance(30 * time.Second)
	deny("principal:p")
	clk.advance(30 * time.Second) // the first is a window old now
	if spent, _ := deny("principal:p"); spent {
		t.Fatal("spent by denials that slid out of the window")
	}
	if s, _ := l.State("principal:p"); s.InWindow != 2 {
		t.Fatalf("in window: %+v", s)
	}
	clk.advance(10 * time.Second)
	spent, until := deny("principal:p")
	if !spent || !until.Equal(clk.now().Add(time.Minute)) {
		t.Fatalf("the third denial in 60 s: spent %v until %v", spent, until)
	}
	// Locked out: every call refused, with when it ends; retrying (and
	// a straggler's denial) does not move the end.
	for range 100 {
		if v := l.Admit("principal:p"); v.Refused != BudgetExhausted || !v.Until.Equal(until) {
			t.Fatalf("locked out: %+v", v)
		}
		if spent, _ := deny("principal:p"); spent {
			t.Fatal("a denial while locked out counted")
		}
		clk.advance(100 * time.Millisecond)
	}
	// Another key is untouched.
	if v := l.Admit("principal:q"); v.Refused != Admitted {
		t.Fatalf("q: %+v", v)
	}
	s, _ := l.State("principal:p")
	if !s.LockedUntil.Equal(until) || s.Exhausted != 100 || s.Spent != 1 || s.InWindow != 0 {
		t.Fatalf("state while locked: %+v", s)
	}
	// The window passes: admitted, with a whole budget.
	clk.advance(until.Sub(clk.now()))
	if v := l.Admit("principal:p"); v.Refused != Admitted {
		t.Fatalf("after the lockout: %+v", v)
	}
	deny("principal:p")
	deny("principal:p")
	if spent, _ := deny("principal:p"); !spent {
		t.Fatal("a whole budget after the lockout: not spent by 3")
	}
	// An approver's reset: admitted at once, the budget whole.
	was, ok := l.Reset("principal:p")
	if !ok || was.LockedUntil.IsZero() {
		t.Fatalf("reset: %+v %v", was, ok)
	}
	if v := l.Admit("principal:p"); v.Refused != Admitted {
		t.Fatalf("after the reset: %+v", v)
	}
	if spent, _ := deny("principal:p"); spent {
		t.Fatal("after the reset, one denial spent it")
	}
	if _, ok := l.Reset("principal:none"); ok {
		t.Fatal("reset of a key without limits")
	}
}

// TestLimiterReconfigure: a reload keeps the state of the keys that keep
// limits (clipped to the new ones, never spent by the reload itself),
// forgets the others, and starts new ones fresh.
func TestLimiterReconfigure(t *testing.T) {
	l, clk := newFake()
	l.Configure(map[string]Limits{
		"principal:a": {Denials: 5, Window: time.Hour, Rate: 1, Burst: 2},
		"principal:b": {Denials: 1, Window: time.Hour},
	})
	for range 4 {
		l.Denied("principal:a")
	}
	l.Admit("principal:a")
	l.Admit("principal:a")
	l.Denied("principal:b") // locked for an hour
	l.Configure(map[string]Limits{
		"principal:a": {Denials: 3, Window: time.Hour, Rate: 1, Burst: 2},
		"principal:c": {Denials: 2, Window: time.Minute},
	})
	s, _ := l.State("principal:a")
	if s.InWindow != 2 || !s.LockedUntil.IsZero() || s.Tokens != 0 {
		t.Fatalf("a after the reload: %+v, want 2 denials kept, not locked, bucket still empty", s)
	}
	if _, spent := l.Denied("principal:a"); spent.IsZero() {
		t.Fatal("a: the budget of 3 not spent by its third denial")
	}
	if _, ok := l.State("principal:b"); ok {
		t.Fatal("b, gone from the manifest, is remembered")
	}
	if v := l.Admit("principal:b"); v.Refused != Admitted {
		t.Fatalf("b without limits: %+v", v)
	}
	if s, ok := l.State("principal:c"); !ok || s.InWindow != 0 {
		t.Fatalf("c: %+v", s)
	}
	// A shorter window shortens a lockout.
	l.Configure(map[string]Limits{"principal:a": {Denials: 3, Window: time.Second}})
	clk.advance(time.Second)
	if v := l.Admit("principal:a"); v.Refused != Admitted {
		t.Fatalf("a after its window shrank: %+v", v)
	}
}

// TestLimiterKeysIndependent: concurrent callers of many keys (run with
// -race): each key's count is its own.
func TestLimiterKeysIndependent(t *testing.T) {
	l, _ := newFake()
	lim := map[string]Limits{}
	for i := range 8 {
		lim[fmt.Sprintf("principal:%d", i)] = Limits{Denials: 1000, Window: time.Hour, Rate: 1, Burst: 1000}
	}
	l.Configure(lim)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprintf("principal:%d", i)
			for range 10 * (i + 1) {
				l.Admit(k)
				l.Denied(k)
			}
		}()
	}
	wg.Wait()
	for i := range 8 {
		s, _ := l.State(fmt.Sprintf("principal:%d", i))
		if s.InWindow != 10*(i+1) || s.Tokens != float64(1000-10*(i+1)) {
			t.Errorf("key %d: %+v", i, s)
		}
	}
}
