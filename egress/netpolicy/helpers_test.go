package netpolicy

import "testing"

func mustPolicy(t testing.TB, c Config) *Policy {
	t.Helper()
	p, err := NewPolicy(c)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}
