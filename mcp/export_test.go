package mcp

// FastCalls is how many tools/calls b's stdio fast path answered.
func FastCalls(b *Bridge) int64 { return b.fastCalls.Load() }
