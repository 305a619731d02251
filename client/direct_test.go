package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// fakeSluiced serves POST /v1/calls on a unix socket: each call streams a
// decision, an output and a result event (or, with block, waits for the
// client to go away). It counts the connections it accepted.
type fakeSluiced struct {
	socket  string
	srv     *http.Server
	conns   atomic.Int32
	gone    chan struct{} // a blocked call's client went away
	blocked chan struct{} // a call that is not streamed is blocked
	idle    chan struct{} // a connection went idle
	closed  chan struct{} // a connection was closed
	mu      sync.Mutex
	nextErr int // non-zero: the next call answers this status
}

func startFake(t *testing.T) *fakeSluiced {
	t.Helper()
	f := &fakeSluiced{socket: filepath.Join(t.TempDir(), "s.sock"), gone: make(chan struct{}, 1), blocked: make(chan struct{}, 1),
		idle: make(chan struct{}, 64), closed: make(chan struct{}, 64)}
	ln, err := net.Listen("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve), ConnState: func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			f.conns.Add(1)
		case http.StateIdle:
			f.idle <- struct{}{}
		case http.StateClosed:
			f.closed <- struct{}{}
		}
	}}
	go f.srv.Serve(ln)
	t.Cleanup(func() { f.srv.Close() })
	return f
}

func (f *fakeSluiced) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	status := f.nextErr
	f.nextErr = 0
	f.mu.Unlock()
	if status != 0 {
		b := []byte(`{"error":{"code":"bad_request","message":"no"}}`)
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		w.WriteHeader(status)
		w.Write(b)
		return
	}
	var req api.CallRequest
	if json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if !req.Stream {
		f.serveResult(w, r, req)
		return
	}
	if req.Task == "length" {
		// As sluiced sends a call none of whose events was live: one
		// body with a Content-Length.
		b := []byte(`{"event":"decision","call_id":"c1","verdict":"allow"}` + "\n" +
			`{"event":"output","stream":"stdout","data":"hel\u006co"}` + "\n" +
			`{"event":"result","call_id":"c1","verdict":"allow","reason":"allowed","ok":true,"bytes":5}` + "\n")
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		w.Write(b)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	fmt.Fprintln(w, `{"event":"decision","call_id":"c1","verdict":"allow"}`)
	rc.Flush()
	if req.Task == "block" {
		<-r.Context().Done()
		f.gone <- struct{}{}
		return
	}
	fmt.Fprintln(w, `{"event":"output","stream":"stdout","data":"hello"}`)
	fmt.Fprintln(w, `{"event":"result","call_id":"c1","verdict":"allow","reason":"allowed","ok":true,"bytes":5}`)
	rc.Flush()
}

// serveResult answers a call that is not streamed: one JSON result,
// with a Content-Length (task "length"), else chunked (its output long,
// its first part flushed before the rest), or, with task "block", only
// once the client has gone away.
func (f *fakeSluiced) serveResult(w http.ResponseWriter, r *http.Request, req api.CallRequest) {
	out := strings.Repeat("x", 6000)
	if req.Task == "length" {
		out = "hello"
	}
	b, _ := json.Marshal(api.CallResult{CallID: "c1", Verdict: "allow", Reason: "allowed", OK: true, Output: &out, Bytes: int64(len(out))})
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	if req.Task == "length" {
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		w.Write(b)
		return
	}
	if req.Task == "block" {
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		f.blocked <- struct{}{}
		<-r.Context().Done()
		f.gone <- struct{}{}
		return
	}
	w.Write(b[:100])
	http.NewResponseController(w).Flush()
	w.Write(b[100:])
}

func TestCallKeepsOneConnection(t *testing.T) {
	f := startFake(t)
	c := New(f.socket)
	defer c.Close()
	for i := range 30 {
		switch i % 3 {
		case 0, 1: // chunked, and with a Content-Length
			task := ""
			want := strings.Repeat("x", 6000)
			if i%3 == 1 {
				task, want = "length", "hello"
			}
			res, err := c.Call(context.Background(), api.CallRequest{Tool: "t", Task: task})
			if err != nil || res.CallID != "c1" || !res.OK || res.Output == nil || *res.Output != want || res.Bytes != int64(len(want)) {
				t.Fatalf("call %d: %+v %v", i, res, err)
			}
		case 2: // a stream on the same connections
			if _, err := c.StreamDirect(context.Background(), api.CallRequest{Tool: "t"}, nil); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
	}
	// A non-decision error is an APIError, and the connection stays.
	f.errorKeepsConnection(t, http.StatusForbidden, func() error {
		_, err := c.Call(context.Background(), api.CallRequest{Tool: "t"})
		return err
	})
}

// errorKeepsConnection checks that a call answered with status (a
// non-decision error) fails with that APIError, that the next call
// succeeds, and that all calls so far went over one connection.
func (f *fakeSluiced) errorKeepsConnection(t *testing.T, status int, call func() error) {
	t.Helper()
	f.mu.Lock()
	f.nextErr = status
	f.mu.Unlock()
	var ae *APIError
	if err := call(); !errors.As(err, &ae) || ae.Status != status || ae.Code != "bad_request" {
		t.Fatalf("want a %d APIError, got %v", status, err)
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	if n := f.conns.Load(); n != 1 {
		t.Fatalf("%d connections for sequential calls, want 1", n)
	}
}

// noIdleConnection checks that c kept no connection (a cancelled call's
// is closed).
func noIdleConnection(t *testing.T, c *Client) {
	t.Helper()
	c.mu.Lock()
	n := len(c.idle)
	c.mu.Unlock()
	if n != 0 {
		t.Fatalf("a cancelled call's connection was kept")
	}
}

func TestCallCancelDropsTheCall(t *testing.T) {
	f := startFake(t)
	c := New(f.socket)
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, api.CallRequest{Tool: "t", Task: "block"})
		done <- err
	}()
	<-f.blocked // the call is running: the client goes away
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	<-f.gone // the server saw the connection go
	noIdleConnection(t, c)
}

func TestStreamDirectKeepsOneConnection(t *testing.T) {
	f := startFake(t)
	c := New(f.socket)
	defer c.Close()
	for i := range 20 {
		var out string
		task := "" // chunked, and with a Content-Length, in turn
		if i%2 == 1 {
			task = "length"
		}
		res, err := c.StreamDirect(context.Background(), api.CallRequest{Tool: "t", Task: task}, func(ev api.Event) error {
			out += ev.Data
			return nil
		})
		if err != nil || res.CallID != "c1" || !res.OK || res.Bytes != 5 || out != "hello" {
			t.Fatalf("call %d: %+v %q %v", i, res, out, err)
		}
	}
	// A non-decision error is an APIError, and the connection stays.
	f.errorKeepsConnection(t, http.StatusBadRequest, func() error {
		_, err := c.StreamDirect(context.Background(), api.CallRequest{Tool: "t"}, nil)
		return err
	})
}

func TestStreamDirectRedialsAClosedIdleConnection(t *testing.T) {
	f := startFake(t)
	c := New(f.socket)
	defer c.Close()
	if _, err := c.StreamDirect(context.Background(), api.CallRequest{Tool: "t"}, nil); err != nil {
		t.Fatal(err)
	}
	// sluiced drops its idle connections (as on its idle timeout): the
	// next call is not lost, it goes on a new connection.
	<-f.idle
	f.srv.SetKeepAlivesEnabled(false) // closes idle connections
	<-f.closed
	f.srv.SetKeepAlivesEnabled(true)
	if _, err := c.StreamDirect(context.Background(), api.CallRequest{Tool: "t"}, nil); err != nil {
		t.Fatalf("after the idle connection was closed: %v", err)
	}
	if n := f.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestStreamDirectCancelDropsTheCall(t *testing.T) {
	f := startFake(t)
	c := New(f.socket)
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	_, err := c.StreamDirect(ctx, api.CallRequest{Tool: "t", Task: "block"}, func(ev api.Event) error {
		if ev.Event == api.EventDecision {
			cancel() // the call is running: the client goes away
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	<-f.gone // the server saw the connection go
	noIdleConnection(t, c)
}
