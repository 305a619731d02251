package mcp

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/jsonenc"
)

// A call's output is the bulk of its tools/call response, and the SDK
// encodes a result in passes: a TextContent's MarshalJSON, then each
// enclosing json.Marshal compacting what the one inside produced
// (CallToolResult, the JSON-RPC result, the JSON-RPC message), four
// passes over every byte of output. Over stdio the bridge encodes a large
// output once instead: the result carries a placeholder, a random token,
// and spliceWriter, which gets each message as one line just before it
// reaches stdout, puts the output's JSON string where the token's is.

// spliceMin is the smallest output spliced; below it the passes cost less
// than the placeholder's bookkeeping.
const spliceMin = 1 << 10

// spliceTTL bounds how long an output waits for its message: one whose
// request was cancelled after its handler returned is never written.
const spliceTTL = time.Minute

const tokenPrefix = `"sluice-output-`

// outputs are the encoded outputs waiting for their message, by token.
type outputs struct {
	mu sync.Mutex
	m  map[string]pending
}

type pending struct {
	enc []byte // the output as a JSON string, quotes included
	at  time.Time
}

func newOutputs() *outputs { return &outputs{m: map[string]pending{}} }

// text is the Text of a TextContent carrying s: s itself when small, else
// a token spliceWriter replaces with s.
func (o *outputs) text(s string) string {
	if o == nil || len(s) < spliceMin {
		return s
	}
	// Marshal's bytes for s, without its reflection and second copy.
	enc := jsonenc.AppendString(make([]byte, 0, len(s)+len(s)/8+2), s)
	var r [16]byte
	_, _ = rand.Read(r[:])
	tok := tokenPrefix[1:] + hex.EncodeToString(r[:])
	now := time.Now()
	o.mu.Lock()
	for k, p := range o.m {
		if now.Sub(p.at) > spliceTTL {
			delete(o.m, k)
		}
	}
	o.m[tok] = pending{enc: enc, at: now}
	o.mu.Unlock()
	return tok
}

// take removes and returns the output of token tok (without quotes).
func (o *outputs) take(tok []byte) ([]byte, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	p, ok := o.m[string(tok)]
	if ok {
		delete(o.m, string(tok))
	}
	return p.enc, ok
}

// spliceWriter is the bridge's stdout when it serves stdio. The SDK
// writes each message (or batch) in one Write, under its own lock.
type spliceWriter struct {
	w   io.Writer
	out *outputs
	buf []byte
}

func (s *spliceWriter) Write(p []byte) (int, error) {
	i := bytes.Index(p, []byte(tokenPrefix))
	if i < 0 {
		return s.w.Write(p)
	}
	b := s.buf[:0]
	rest := p
	for i >= 0 {
		// The token is `"sluice-output-` and 32 hex digits, then `"`.
		end := i + len(tokenPrefix) + 32
		if end >= len(rest) || rest[end] != '"' {
			b = append(b, rest[:i+1]...)
			rest = rest[i+1:]
		} else if enc, ok := s.out.take(rest[i+1 : end]); ok {
			b = append(b, rest[:i]...)
			b = append(b, enc...)
			rest = rest[end+1:]
		} else {
			// Not one of ours (text that spells a token): as it is.
			b = append(b, rest[:end+1]...)
			rest = rest[end+1:]
		}
		i = bytes.Index(rest, []byte(tokenPrefix))
	}
	b = append(b, rest...)
	if cap(b) <= 1<<20 {
		s.buf = b
	}
	if _, err := s.w.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}

// nopCloser is stdout for the SDK's IOTransport: closing the session does
// not close it (as the SDK's StdioTransport does not).
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
