//go:build linux

package mcphost

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

type ctxKey struct{}

// TestHandlerBindsCapsAndRecovers: a session's requests reach sluiced's
// handler with the session's peer bound in their context, at most
// maxConns at once (the next is a 503, as the socket's per-uid cap
// refuses a connection), and a panic ends the request, not sluiced.
func TestHandlerBindsCapsAndRecovers(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	sluiced := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(ctxKey{}) != "peer 65534" {
			t.Errorf("the request's context does not carry the session's peer")
		}
		switch r.URL.Path {
		case "/block":
			entered <- struct{}{}
			<-release
		case "/panic":
			panic("a bug")
		}
		_, _ = io.WriteString(w, "ok")
	})
	h := New(sluiced, "/s", 1, time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	hh := h.handler(func(ctx context.Context) context.Context { return context.WithValue(ctx, ctxKey{}, "peer 65534") }, make(chan struct{}, 1))
	serve := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		hh.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		return w
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- serve("/block") }()
	<-entered
	if w := serve("/other"); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "too many requests") {
		t.Fatalf("a second request while the one slot is taken: %d %s", w.Code, w.Body)
	}
	close(release)
	if w := <-done; w.Body.String() != "ok" {
		t.Fatalf("the first request: %d %s", w.Code, w.Body)
	}
	serve("/panic") // recovered: the test goes on
	if w := serve("/other"); w.Body.String() != "ok" {
		t.Fatalf("after a panic, the slot is free again: %d %s", w.Code, w.Body)
	}
}

type nopStream struct{ writes int }

func (s *nopStream) Read(p []byte) (int, error)       { return 0, io.EOF }
func (s *nopStream) Write(p []byte) (int, error)      { s.writes++; return len(p), nil }
func (s *nopStream) SetReadDeadline(time.Time) error  { return nil }
func (s *nopStream) SetWriteDeadline(time.Time) error { return nil }
func (s *nopStream) Close() error                     { return nil }

// TestTimedWriterStopsAtTheEnd: once the session ended, a write returns at
// once and reaches nothing (a fresh deadline would override the past one
// the end set, and each write would wait on a client that reads nothing).
func TestTimedWriterStopsAtTheEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &nopStream{}
	w := &timedWriter{ctx: ctx, s: s, d: time.Minute, fail: cancel}
	if _, err := w.Write([]byte("a\n")); err != nil || s.writes != 1 {
		t.Fatalf("a write while the session lasts: %v, %d", err, s.writes)
	}
	cancel()
	if _, err := w.Write([]byte("b\n")); err == nil || s.writes != 1 {
		t.Fatalf("a write after the end: %v, reached the stream %d times", err, s.writes)
	}
}
