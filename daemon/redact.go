//go:build linux

package daemon

import (
	"bytes"
	"sync"

	"github.com/sluicehq/sluice/internal/secretscan"
)

// Redaction (docs/security.md, "Redaction"): with a tool's redact key,
// every secret in what its calls return is replaced by
// "[REDACTED:kind]" before it leaves the daemon: the output (a read, a
// fetched body, a command's stdout, streamed or not), a command's
// stderr, a search's lines and paths. The result says how many
// (redacted) and the result record counts them by kind, never a value.
// A replacement may be longer than what it replaced: the output is then
// cut again to max_bytes (truncated), a read at a line, so that bytes
// still counts what is returned.

// redactsExtra is an operation's result with text of its own that
// leaves the daemon beside the output (a command's stderr).
type redactsExtra interface {
	redactExtra(s *secretscan.Scanner, max int64) secretscan.Counts
}

// recutter is an operation's result whose fields follow where its output
// was cut (a read's next_offset): recut cuts the redacted out to at most
// max bytes.
type recutter interface {
	recut(out []byte, max int64) []byte
}

// redactOutcome redacts what an allowed call's outcome returns, unless
// its operation did (o.redacted set: search).
func (c *call) redactOutcome(o *outcome) {
	if o == nil {
		return
	}
	var before secretscan.Counts
	if r, ok := o.result.(redactedBefore); ok {
		before = r.redactedBefore()
	}
	s := c.tool.Redactor()
	if s == nil {
		if before.Total() > 0 {
			o.redacted = before
		}
		return
	}
	max := c.tool.EffectiveMaxBytes()
	counts := o.redacted
	if counts == nil {
		counts = secretscan.Counts{}
		if len(o.output) > 0 {
			if out, n := s.Redact(o.output); n.Total() > 0 {
				counts.Add(n)
				o.output = out
			}
		}
		if int64(len(o.output)) > max {
			if r, ok := o.result.(recutter); ok {
				o.output = r.recut(o.output, max)
			} else {
				o.output = o.output[:max]
			}
			o.truncated = true
		}
	}
	if r, ok := o.result.(redactsExtra); ok {
		counts.Add(r.redactExtra(s, max))
	}
	counts.Add(before)
	o.redacted = counts
}

// redactedBefore is an operation's result that replaced secrets itself
// before any redact key ran (a fetch's or post's credential echoes,
// egress.CredentialMark): counted with the rest.
type redactedBefore interface {
	redactedBefore() secretscan.Counts
}

// redactChunks wraps a streamed call's chunk callback: each stream goes
// through its own secretscan.Writer (a secret split across chunks is
// caught), capped at max_bytes as the buffered output is; end flushes
// what the writers hold once the command has ended. The bytes sent are
// the ones the outcome's output holds after redactOutcome (a Writer's
// result never depends on how its input was cut).
func (c *call) redactChunks(onChunk func(string, []byte)) (func(string, []byte), func()) {
	s := c.tool.Redactor()
	if s == nil || onChunk == nil {
		return onChunk, func() {}
	}
	max := c.tool.EffectiveMaxBytes()
	var mu sync.Mutex
	writers := map[string]*secretscan.Writer{}
	order := []string{}
	wrapped := func(stream string, data []byte) {
		mu.Lock()
		defer mu.Unlock()
		w := writers[stream]
		if w == nil {
			w = s.NewWriter(&chunkSink{stream: stream, send: onChunk, room: max})
			writers[stream] = w
			order = append(order, stream)
		}
		_, _ = w.Write(data)
	}
	end := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, stream := range order {
			_ = writers[stream].Flush()
		}
	}
	return wrapped, end
}

// chunkSink sends a stream's redacted bytes as output events, up to room.
type chunkSink struct {
	stream string
	send   func(string, []byte)
	room   int64
}

func (k *chunkSink) Write(p []byte) (int, error) {
	n := len(p)
	if int64(len(p)) > k.room {
		p = p[:k.room]
	}
	if len(p) > 0 {
		k.room -= int64(len(p))
		k.send(k.stream, bytes.Clone(p))
	}
	return n, nil
}
