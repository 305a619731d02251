package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Over stdio the bridge reads stdin itself. A plain tools/call (its
// params only a name and arguments: no progress token, no _meta) of a
// tool the bridge serves, once the SDK's session is initialized, is
// answered here: the same handler the SDK would call, its result encoded
// as the SDK encodes it, on a goroutine of its own. Every other line goes
// to the SDK's session, unchanged, through a pipe; a
// notifications/cancelled also cancels the fast call it names. Both write
// their responses through one locked writer, a message per Write.
//
// It skips the SDK's stdin reader goroutine and channel, decoding each
// request first as a batch, then as a message, and the jsonrpc2
// connection's bookkeeping of a call: a third of the MCP hop of a small
// read.

// fastMaxLine: a longer line goes to the SDK, streamed as it is read (the
// SDK applies its line limit).
const fastMaxLine = 64 << 10

// newProtocol is the first MCP version whose results the SDK annotates
// (resultType, serverInfo in _meta): a session that negotiated it or later
// is left to the SDK.
const newProtocol = "2026-07-28"

// lockedWriter makes each Write whole: the SDK's messages and the fast
// path's never interleave.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
	// pending, when set, counts out each response written.
	pending *pendingSet
}

// writeUncounted writes p, a refusal of a call never counted in.
func (l *lockedWriter) writeUncounted(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending != nil {
		l.pending.answered(p)
	}
	return l.w.Write(p)
}

type fastStdio struct {
	b     *Bridge
	in    io.Reader
	toSDK *io.PipeWriter
	out   *lockedWriter
	ss    *sdk.ServerSession

	mu       sync.Mutex
	inflight map[string]context.CancelFunc // fast calls by id key
	wg       sync.WaitGroup
	// eof is set once in ended: the client is gone.
	eof atomic.Bool
	// detaching: StdioOptions.Detach closed; handedOff: reading then
	// stopped between two messages, rest what it had of the next.
	detaching, handedOff atomic.Bool
	rest                 []byte
	// pending: StdioOptions.MaxPending's count, nil without a bound;
	// maxLine: the longest line a bounded session reads whole.
	pending *pendingSet
	maxLine int
}

// RunStdio serves the MCP session as Run does over stdio, on in and out
// (newline-delimited JSON-RPC), until in ends or ctx does. maxLine is the
// SDK's MaxLineLength.
func (b *Bridge) RunStdio(ctx context.Context, in io.Reader, out io.Writer, maxLine int) error {
	_, err := b.RunStdioSession(ctx, in, out, StdioOptions{MaxLine: maxLine})
	return err
}

// StdioOptions are a stdio session's, beyond its streams.
type StdioOptions struct {
	// MaxLine is the SDK's MaxLineLength (0: its default).
	MaxLine int
	// State resumes a session another host began (Handoff.State): it
	// is not initialized again.
	State *sdk.ServerSessionState
	// MaxPending, when positive, bounds the requests read and not yet
	// answered: past it a request is answered at once with an error
	// (sluiced's attached sessions: a client that sends and never reads
	// holds no more than this many calls in sluiced).
	MaxPending int
	// Detach, once closed, hands the session over rather than serving
	// on: reading stops at a message's end (in must have
	// SetReadDeadline, as an *os.File of a pipe or a socket has), the
	// requests already read are answered, and RunStdioSession returns
	// the Handoff. sluiced detaches its attached sessions when it stops
	// (docs/clients.md "Attached sessions").
	Detach <-chan struct{}
}

// Handoff is a session detached from its host, for the next to resume.
type Handoff struct {
	// State is the session's (nil: it was not initialized yet).
	State *sdk.ServerSessionState
	// Rest was read from in but not served: the start of its next
	// message.
	Rest []byte
}

// RunStdioSession is RunStdio with options. It returns a Handoff when
// opts.Detach closed and the session was handed over whole, else nil.
func (b *Bridge) RunStdioSession(ctx context.Context, in io.Reader, out io.Writer, opts StdioOptions) (*Handoff, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.out = newOutputs()
	w := &lockedWriter{w: &spliceWriter{w: out, out: b.out}}
	pr, pw := io.Pipe()
	f := &fastStdio{b: b, in: in, toSDK: pw, out: w, inflight: map[string]context.CancelFunc{}}
	if opts.MaxPending > 0 {
		f.pending = newPendingSet(opts.MaxPending)
		w.pending = f.pending
		f.maxLine = opts.MaxLine
		if f.maxLine <= 0 {
			f.maxLine = 16 << 20 // the SDK's default
		}
	}
	b.Start(ctx)
	ss, err := b.srv.Connect(ctx, &sdk.IOTransport{Reader: pr, Writer: nopCloser{w}, MaxLineLength: opts.MaxLine},
		&sdk.ServerSessionOptions{State: opts.State})
	if err != nil {
		return nil, err
	}
	f.ss = ss
	readDone := make(chan struct{})
	go func() {
		f.read(ctx)
		close(readDone)
	}()
	if opts.Detach != nil {
		go func() {
			select {
			case <-opts.Detach:
				f.detaching.Store(true)
				if d, ok := in.(interface{ SetReadDeadline(time.Time) error }); ok {
					_ = d.SetReadDeadline(time.Unix(1, 0)) // ends the read now
				}
			case <-readDone:
			case <-ctx.Done():
			}
		}()
	}
	done := make(chan error, 1)
	go func() { done <- ss.Wait() }()
	select {
	case <-ctx.Done():
		ss.Close()
		<-done
		err = ctx.Err()
	case err = <-done:
	}
	if f.handedOff.Load() && ctx.Err() == nil {
		// Reading stopped at a message's end and the SDK answered what
		// it had; the fast calls finish too, uncancelled, before the
		// next host writes.
		f.wg.Wait()
		h := &Handoff{Rest: f.rest}
		if ip := ss.InitializeParams(); ip != nil {
			h.State = &sdk.ServerSessionState{InitializeParams: ip, InitializedParams: &sdk.InitializedParams{}}
		}
		return h, nil
	}
	if f.eof.Load() && (errors.Is(err, io.ErrClosedPipe) || errors.Is(err, syscall.EPIPE)) {
		// The client closed our stdin and stdout together; a
		// notification (a debounced tools/list_changed, a progress
		// message) that met the closed stdout is no failure of ours.
		err = nil
	}
	// No fast call writes after the session: cancelled, and waited for.
	cancel()
	f.wg.Wait()
	return nil, err
}

// read reads in line by line until it ends, then ends the SDK's input.
func (f *fastStdio) read(ctx context.Context) {
	br := bufio.NewReaderSize(f.in, fastMaxLine)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) && f.pending != nil {
			// Bounded: the request a long line is must be counted like
			// any other, so it is read whole (up to the SDK's own line
			// limit) before it goes on.
			long := bytes.Clone(line)
			for errors.Is(err, bufio.ErrBufferFull) && len(long) <= f.maxLine {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
			if errors.Is(err, bufio.ErrBufferFull) {
				err = errTooLong
			}
		}
		if err != nil && f.detaching.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
			// Detached between two messages: what was read of the next
			// goes to the next host. The calls the SDK has end as
			// sluiced's calls do when it stops before its input ends
			// (at its input's end the SDK cancels what it runs).
			f.rest = bytes.Clone(line)
			f.handedOff.Store(true)
			if f.pending != nil {
				f.pending.waitEmpty(ctx)
			}
			f.toSDK.Close()
			return
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line, streamed to the SDK: a detach in its middle
			// cannot hand the session over (the SDK has half of it).
			for errors.Is(err, bufio.ErrBufferFull) {
				if _, werr := f.toSDK.Write(line); werr != nil {
					return
				}
				line, err = br.ReadSlice('\n')
			}
		} else if len(line) > 0 && f.pending != nil && !f.admit(line) {
			line = nil // answered: too many pending
		} else if len(line) > 0 && len(line) <= fastMaxLine && f.serve(ctx, line) {
			line = nil
		}
		if len(line) > 0 {
			if _, werr := f.toSDK.Write(line); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
				f.eof.Store(true)
			}
			f.toSDK.CloseWithError(err)
			return
		}
	}
}

// errTooLong ends a bounded session that sends a line longer than its
// MaxLine.
var errTooLong = errors.New("a message longer than the session's line limit")

// admit counts line in if it is a call; a refused one (past the bound,
// a duplicate id, a batch) is answered here, at once (false).
func (f *fastStdio) admit(line []byte) bool {
	refusal := f.pending.admit(line)
	if refusal == nil {
		return true
	}
	_, _ = f.out.writeUncounted(refusal)
	return false
}

// serve answers line if it is a fast tools/call (true), and cancels the
// fast call a notifications/cancelled names (false: the SDK gets it too).
func (f *fastStdio) serve(ctx context.Context, line []byte) bool {
	call := bytes.Contains(line, []byte(`"tools/call"`))
	if !call && !bytes.Contains(line, []byte(`"notifications/cancelled"`)) {
		return false
	}
	var msg map[string]json.RawMessage
	if json.Unmarshal(line, &msg) != nil || string(msg["jsonrpc"]) != `"2.0"` {
		return false
	}
	switch string(msg["method"]) {
	case `"notifications/cancelled"`:
		var p map[string]json.RawMessage
		if json.Unmarshal(msg["params"], &p) == nil {
			if _, key, ok := wireID(p["requestId"]); ok {
				f.mu.Lock()
				stop := f.inflight[key]
				f.mu.Unlock()
				if stop != nil {
					stop()
				}
			}
		}
		return false
	case `"tools/call"`:
	default:
		return false
	}
	if len(msg) != 4 || msg["params"] == nil {
		return false
	}
	id, key, ok := wireID(msg["id"])
	if !ok {
		return false
	}
	var p map[string]json.RawMessage
	if json.Unmarshal(msg["params"], &p) != nil {
		return false
	}
	for k := range p {
		if k != "name" && k != "arguments" {
			return false
		}
	}
	var name string
	if p["name"] == nil || json.Unmarshal(p["name"], &name) != nil {
		return false
	}
	if ip := f.ss.InitializeParams(); ip == nil || ip.ProtocolVersion >= newProtocol {
		return false
	}
	f.b.mu.Lock()
	_, known := f.b.tools[name]
	f.b.mu.Unlock()
	if !known {
		return false
	}
	f.mu.Lock()
	if _, dup := f.inflight[key]; dup {
		f.mu.Unlock()
		return false
	}
	cctx, cancel := context.WithCancel(ctx)
	f.inflight[key] = cancel
	f.wg.Add(1)
	f.mu.Unlock()
	f.b.fastCalls.Add(1)
	go f.call(cctx, cancel, key, id, name, p["arguments"])
	return true
}

// call runs one fast tools/call and writes its response as the SDK would.
func (f *fastStdio) call(ctx context.Context, cancel context.CancelFunc, key string, id []byte, name string, args json.RawMessage) {
	defer f.wg.Done()
	res, err := f.b.handler(name)(ctx, &sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{Name: name, Arguments: args}})
	f.mu.Lock()
	delete(f.inflight, key)
	f.mu.Unlock()
	cancel()
	msg := make([]byte, 0, 512)
	msg = append(msg, `{"jsonrpc":"2.0","id":`...)
	msg = append(msg, id...)
	var data []byte
	if err == nil {
		if data, err = encodeResult(res); err != nil {
			err = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "sluice: encoding the result: " + err.Error()}
		} else {
			msg = append(msg, `,"result":`...)
		}
	}
	if err != nil {
		data = marshalNoEscape(wireError(err))
		msg = append(msg, `,"error":`...)
	}
	msg = append(msg, data...)
	msg = append(msg, "}\n"...)
	_, _ = f.out.Write(msg)
}

// encodeResult is json.Marshal(res) without its last pass: Marshal
// compacts (and HTML-escapes) what a Marshaler returns, and the SDK's
// CallToolResult.MarshalJSON returns json.Marshal's own output, compact
// and escaped already, so that pass, over every byte of the result,
// changes nothing (TestMCPStdioFastSameAsSDK holds the bytes to the
// SDK's).
func encodeResult(res *sdk.CallToolResult) ([]byte, error) {
	if res == nil {
		return []byte("null"), nil
	}
	return res.MarshalJSON()
}

// wireError is err as the SDK's jsonrpc2 puts it in a response.
func wireError(err error) *jsonrpc.Error {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		if we == err {
			return we
		}
		return &jsonrpc.Error{Code: we.Code, Message: err.Error()}
	}
	return &jsonrpc.Error{Message: err.Error()}
}

// wireID is a request id as the SDK writes it back (an integer, or a
// string), and its key among the fast calls. Anything else (a fraction,
// an integer JSON numbers do not carry exactly, null): not ok.
func wireID(raw json.RawMessage) (enc []byte, key string, ok bool) {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, "", false
		}
		return marshalNoEscape(s), "s" + s, true
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n > 1<<53 || n < -(1<<53) {
		return nil, "", false
	}
	return strconv.AppendInt(nil, n, 10), "i" + strconv.FormatInt(n, 10), true
}

func marshalNoEscape(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
