package mcp

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
)

// TestMaxPendingAnswersPastTheBound: with MaxPending 2, a third request
// read while two wait is answered at once with an error, and reading goes
// on: a notifications/cancelled frees its request's place, and the next
// request is taken.
func TestMaxPendingAnswersPastTheBound(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/tools":
			_, _ = io.WriteString(w, `{"tools":[{"name":"t","operation":"read","args_schema":{"type":"object"}}]}`+"\n")
		case "/v1/events":
			<-r.Context().Done()
		case "/v1/calls":
			_, _ = io.WriteString(w, `{"event":"decision","verdict":"allow","call_id":"c"}`+"\n")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			_, _ = io.WriteString(w, `{"event":"result","verdict":"allow","output":"ok","bytes":2,"call_id":"c"}`+"\n")
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
	b := New(Options{Socket: "/s", Client: client.NewInProcess("/s", h)})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := b.RunStdioSession(ctx, inR, outW, StdioOptions{MaxPending: 2})
		done <- err
	}()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	send := func(s string) {
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func(want string) string {
		t.Helper()
		select {
		case l := <-lines:
			if !strings.Contains(l, want) {
				t.Fatalf("got %s, want a line with %s", l, want)
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("no line with %s", want)
		}
		return ""
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	next(`"id":1,"result"`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	next(`"id":2,"result"`)
	send(`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"t","arguments":{}}}`)
	send(`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"t","arguments":{}}}`)
	send(`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"t","arguments":{}}}`)
	next(`"id":12,"error":{"code":-32603,"message":"sluice: 2 requests of this session are in flight`)
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":10}}`)
	send(`{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"t","arguments":{}}}`)
	got := map[string]bool{}
	got[next(`"id":1`)[:30]] = true // 10, cancelled, answers first
	close(release)
	got[next(`"id":1`)[:30]] = true
	got[next(`"id":1`)[:30]] = true
	for _, id := range []string{`"id":10,`, `"id":11,`, `"id":13,`} {
		found := false
		for k := range got {
			found = found || strings.Contains(k, id)
		}
		if !found {
			t.Fatalf("no response to %s among %v", id, got)
		}
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatalf("session: %v", err)
	}
	outW.Close()
	for range lines {
	}
}

// TestPendingCountsWhatTheSDKServes: lines are classified by the SDK's
// own decoder, so the forms a first review slipped past the count are
// counted (case-folded keys, a fractional id the SDK truncates), a
// duplicate id and a batch are refused, and a response counts its call
// out by the id the SDK writes.
func TestPendingCountsWhatTheSDKServes(t *testing.T) {
	p := newPendingSet(2)
	if r := p.admit([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")); r != nil {
		t.Fatalf("a call: %s", r)
	}
	if r := p.admit([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)); r == nil || !strings.Contains(string(r), "still in flight") || !strings.Contains(string(r), `"id":1`) {
		t.Fatalf("the same id again: %s", r)
	}
	if r := p.admit([]byte(`{"jsonrpc":"2.0","id":100.5,"method":"ping","ID":null,"Method":null}`)); r != nil {
		t.Fatalf("a second call: %s", r)
	}
	if r := p.admit([]byte(`{"jsonrpc":"2.0","id":"x","method":"ping"}`)); r == nil || !strings.Contains(string(r), "2 requests of this session are in flight") {
		t.Fatalf("a third call past the bound: %s", r)
	}
	if r := p.admit([]byte(`[{"jsonrpc":"2.0","id":7,"method":"ping"}]`)); r == nil || !strings.Contains(string(r), "batch") {
		t.Fatalf("a batch: %s", r)
	}
	for _, spread := range []string{`{"jsonrpc":"2.0",`, `{"jsonrpc":"2.0","id":8,"method":"ping"}` + "\r" + `{"jsonrpc":"2.0","id":9,"method":"ping"}`, `"id":5}`} {
		if r := p.admit([]byte(spread + "\n")); r == nil || !strings.Contains(string(r), "-32700") {
			t.Fatalf("%q, not one message on its line: %s", spread, r)
		}
	}
	if r := p.admit([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); r != nil {
		t.Fatalf("a notification: %s", r)
	}
	p.answered([]byte(`{"jsonrpc":"2.0","id":100,"result":{}}` + "\n"))   // the SDK's id for 100.5
	p.answered([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")) // a request of the server's: not an answer
	if len(p.ids) != 1 {
		t.Fatalf("pending %v, want only id 1", p.ids)
	}
	p.answered([]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":0,"message":"x"}}` + "\n"))
	if len(p.ids) != 0 {
		t.Fatalf("pending %v, want none", p.ids)
	}
	if r := p.admit([]byte(`{"jsonrpc":"2.0","id":"a\"b,}","method":"ping"}`)); r != nil {
		t.Fatalf("a string id: %s", r)
	}
	p.answered([]byte(`{"jsonrpc":"2.0","id":"a\"b,}","result":{}}` + "\n"))
	if len(p.ids) != 0 {
		t.Fatalf("pending %v after the string id's answer, want none", p.ids)
	}
}
