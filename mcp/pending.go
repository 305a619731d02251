package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// pendingSet bounds a session's requests read and not yet answered
// (StdioOptions.MaxPending), by id: a request is counted in when read and
// out when its response is written (the SDK, and the fast path, answer
// every call, a cancelled one too). Lines are classified by the SDK's own
// decoder, so what it serves as a call is what is counted. Past the bound,
// a request whose id is already pending, and a batch, are answered at
// once with an error (written uncounted), and reading goes on.
type pendingSet struct {
	max   int
	mu    sync.Mutex
	ids   map[string]struct{}
	empty *sync.Cond // signalled as ids shrink
}

func newPendingSet(max int) *pendingSet {
	p := &pendingSet{max: max, ids: map[string]struct{}{}}
	p.empty = sync.NewCond(&p.mu)
	return p
}

// waitEmpty waits until every counted call is answered, or ctx ends.
func (p *pendingSet) waitEmpty(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.empty.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.ids) > 0 && ctx.Err() == nil {
		p.empty.Wait()
	}
}

// idKey is an id as the SDK holds it (an int64 or a string).
func idKey(id jsonrpc.ID) string {
	return fmt.Sprintf("%T:%v", id.Raw(), id.Raw())
}

// admit counts in the call line is, if it is one. A refusal is the
// response to write instead of serving the line (nil: go on).
func (p *pendingSet) admit(line []byte) (refusal []byte) {
	t := bytes.TrimSpace(line)
	if len(t) == 0 {
		return nil
	}
	if t[0] == '[' {
		return []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"sluice: a batch is not taken here (MCP 2025-06-18 dropped batches): send one message a line"}}` + "\n")
	}
	if t[0] != '{' || !json.Valid(t) {
		// The SDK frames with a JSON decoder, not by lines: a message
		// spread over lines, or two on one, would reach it uncounted.
		// MCP's stdio transport has one message a line.
		return []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"sluice: not one JSON-RPC message on its own line (MCP stdio has one message a line, without newlines inside)"}}` + "\n")
	}
	msg, err := jsonrpc.DecodeMessage(bytes.TrimRight(line, "\r\n"))
	if err != nil {
		return nil // the SDK refuses it the same way
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return nil // a notification, or a response to the server
	}
	key := idKey(req.ID)
	p.mu.Lock()
	_, dup := p.ids[key]
	full := len(p.ids) >= p.max
	if !dup && !full {
		p.ids[key] = struct{}{}
	}
	p.mu.Unlock()
	var why string
	switch {
	case dup:
		why = "sluice: a request with this id is still in flight"
	case full:
		why = fmt.Sprintf("sluice: %d requests of this session are in flight, the most sluiced takes at once; retry once some are answered", p.max)
	default:
		return nil
	}
	b, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: -32603, Message: why}})
	if err != nil {
		return nil
	}
	return append(b, '\n')
}

// answered counts out the call msg (one outgoing message) answers:
// responses begin with the jsonrpc version and the id, as the SDK's
// EncodeMessage and the fast path write them; a request of the server's
// has a method after its id.
func (p *pendingSet) answered(msg []byte) {
	rest, ok := bytes.CutPrefix(msg, []byte(`{"jsonrpc":"2.0","id":`))
	if !ok {
		return
	}
	// The id's JSON value, as encoding/json would give it (a string or a
	// float64), found without a decoder: this runs for every response.
	var v any
	var end int
	if len(rest) > 0 && rest[0] == '"' {
		end = 1
		for end < len(rest) && rest[end] != '"' {
			if rest[end] == '\\' {
				end++
			}
			end++
		}
		end++
		var str string
		if end > len(rest) || json.Unmarshal(rest[:end], &str) != nil {
			return
		}
		v = str
	} else {
		end = bytes.IndexAny(rest, ",}")
		if end < 0 {
			return
		}
		f, err := strconv.ParseFloat(string(bytes.TrimSpace(rest[:end])), 64)
		if err != nil {
			return
		}
		v = f
	}
	if bytes.HasPrefix(rest[end:], []byte(`,"method"`)) {
		return
	}
	id, err := jsonrpc.MakeID(v)
	if err != nil || !id.IsValid() {
		return
	}
	p.mu.Lock()
	delete(p.ids, idKey(id))
	if len(p.ids) == 0 {
		p.empty.Broadcast()
	}
	p.mu.Unlock()
}
