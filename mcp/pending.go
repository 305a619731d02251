package mcp

import (
	"bytes"
	"encoding/json"
	"sync"
)

// pendingSet bounds a session's requests read and not yet answered
// (StdioOptions.MaxPending), by id: a request is counted in when read,
// out when its response is written or the client cancels it (a cancelled
// request may get no response). Past the bound a request is answered at
// once with an error, and reading goes on (a notifications/cancelled
// must still get through).
type pendingSet struct {
	max int
	mu  sync.Mutex
	ids map[string]struct{}
}

func newPendingSet(max int) *pendingSet {
	return &pendingSet{max: max, ids: map[string]struct{}{}}
}

// admit counts in the request line carries, if it is one (a method and
// an id); false: it is one, and the session has its most pending.
func (p *pendingSet) admit(line []byte) (id json.RawMessage, ok bool) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method *string         `json:"method"`
	}
	if json.Unmarshal(line, &m) != nil || m.Method == nil {
		return nil, true // a batch, a notification, not JSON: not counted
	}
	_, key, isID := wireID(m.ID)
	if !isID {
		return nil, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ids) >= p.max {
		return m.ID, false
	}
	p.ids[key] = struct{}{}
	return m.ID, true
}

// forget counts out the request whose id is raw.
func (p *pendingSet) forget(raw json.RawMessage) {
	if _, key, ok := wireID(raw); ok {
		p.mu.Lock()
		delete(p.ids, key)
		p.mu.Unlock()
	}
}

// answered counts out the request msg (one outgoing message) answers:
// responses begin with the jsonrpc version and the id, as the SDK's and
// the fast path's both write them; a request of the server's has a
// method after its id.
func (p *pendingSet) answered(msg []byte) {
	rest, ok := bytes.CutPrefix(msg, []byte(`{"jsonrpc":"2.0","id":`))
	if !ok {
		return
	}
	dec := json.NewDecoder(bytes.NewReader(rest))
	var raw json.RawMessage
	if dec.Decode(&raw) != nil {
		return
	}
	after := rest[dec.InputOffset():]
	if bytes.HasPrefix(after, []byte(`,"method"`)) {
		return
	}
	p.forget(raw)
}
