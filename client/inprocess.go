package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/sluicehq/sluice/api"
)

// NewInProcess returns a client whose requests h serves in this process,
// never over a socket: sluiced's attached MCP sessions (daemon/mcphost)
// call its handlers this way, h having put the session's peer in each
// request's context. Call and StreamDirect run h in the caller's
// goroutine, each event handed to fn as h writes it; the other requests
// run h on a goroutine of its own and read its response as it is
// written (an event stream lasts as long as h does). socket is only
// named in errors.
func NewInProcess(socket string, h http.Handler) *Client {
	return &Client{
		Socket:  socket,
		http:    &http.Client{Transport: handlerTransport{h}},
		handler: h,
		dial: func(context.Context) (net.Conn, error) {
			return nil, errors.New("an in-process client has no connections")
		},
	}
}

// inProcess is direct's call when c.handler serves it: the request built
// as sluiced's server would have parsed it, the response read as h
// writes it.
func (c *Client) inProcess(ctx context.Context, body []byte, streamed bool, fn func(api.Event) error) (*api.CallResult, error) {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://sluice/v1/calls", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	r.RequestURI = "/v1/calls"
	r.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		r.Header.Set("Authorization", "Bearer "+c.token)
	}
	w := &eventWriter{header: http.Header{}, streamed: streamed, fn: fn, cancel: cancel}
	c.handler.ServeHTTP(w, r)
	if err := parent.Err(); err != nil && w.res == nil {
		return nil, err // the caller's context ended: the call was dropped
	}
	if w.err != nil {
		return nil, w.err
	}
	if w.status != http.StatusOK {
		return nil, apiError(w.status, w.buf)
	}
	if !streamed {
		var res api.CallResult
		if err := json.Unmarshal(w.buf, &res); err != nil {
			return nil, errors.New("bad result from sluiced: " + err.Error())
		}
		return &res, nil
	}
	if w.res == nil {
		return nil, errors.New("stream ended without a result event")
	}
	return w.res, nil
}

// eventWriter is the response writer of an in-process call: it keeps an
// error's or a result's body, and hands a stream's events to fn one line
// at a time as they are written.
type eventWriter struct {
	header   http.Header
	status   int
	streamed bool
	fn       func(api.Event) error
	cancel   context.CancelFunc

	buf []byte
	off int // buf[:off] handed over
	res *api.CallResult
	err error
}

func (w *eventWriter) Header() http.Header { return w.header }

func (w *eventWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *eventWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.res != nil {
		return len(p), nil // after the result: the stream's end
	}
	w.buf = append(w.buf, p...)
	if w.streamed && w.status == http.StatusOK {
		w.scan()
	}
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// Flush: each event is handed over as its line is written.
func (w *eventWriter) Flush() {}

// scan hands over each whole line written since the last one.
func (w *eventWriter) scan() {
	for w.res == nil && w.err == nil {
		i := bytes.IndexByte(w.buf[w.off:], '\n')
		if i < 0 {
			break
		}
		line := w.buf[w.off : w.off+i]
		w.off += i + 1
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev api.Event
		if err := decodeEvent(line, &ev); err != nil {
			w.stop(errors.New("bad event from sluiced: " + err.Error()))
			return
		}
		if w.fn != nil {
			if err := w.fn(ev); err != nil {
				w.stop(err)
				return
			}
		}
		if ev.Event == api.EventResult {
			r := ev.CallResult
			w.res = &r
		}
	}
	if w.off == len(w.buf) {
		w.buf, w.off = w.buf[:0], 0
	}
}

// stop ends the call as a dropped connection would: its context ends,
// and the handler's writes fail from then on.
func (w *eventWriter) stop(err error) {
	w.err = err
	w.cancel()
}

// handlerTransport serves an http.Client's requests with a handler on a
// goroutine of the request's own, the response read as it is written.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if r.Body == nil {
		r.Body = http.NoBody
	}
	r.RequestURI = req.URL.RequestURI()
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			w.head(http.StatusOK)
			pw.Close()
		}()
		t.h.ServeHTTP(w, r)
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{
		Status: http.StatusText(w.status), StatusCode: w.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: pr, ContentLength: -1, Request: req,
	}, nil
}

// pipeWriter is handlerTransport's response writer: the status and
// header once the handler first writes (or returns), the body through a
// pipe.
type pipeWriter struct {
	header http.Header // the handler's
	sent   http.Header // header as it was when the handler first wrote
	pw     *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
	status int
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) head(status int) {
	w.once.Do(func() {
		w.status = status
		w.sent = w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) WriteHeader(status int) { w.head(status) }

func (w *pipeWriter) Write(p []byte) (int, error) {
	w.head(http.StatusOK)
	return w.pw.Write(p)
}

func (w *pipeWriter) Flush() { w.head(http.StatusOK) }
