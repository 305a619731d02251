package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// streamHandler answers /v1/calls as sluiced streams a call: a decision,
// an output event, the result (each line flushed), and then more, which
// no reader may see. It records what it was asked and whether its
// request's context ended.
type streamHandler struct {
	path, auth, body string
	cancelled        bool
	block            bool // after the decision, wait for the context
}

func (h *streamHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.path, h.auth, h.body = r.URL.Path, r.Header.Get("Authorization"), string(b)
	switch r.URL.Path {
	case "/v1/tools":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"tools":[{"name":"t","operation":"read"}]}` + "\n"))
		return
	case "/v1/calls":
	default:
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if strings.Contains(h.body, `"tool":"forbidden"`) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"error":{"code":"forbidden","message":"no"}}` + "\n"))
		return
	}
	if !strings.Contains(h.body, `"stream":true`) {
		_, _ = w.Write([]byte(`{"verdict":"allow","bytes":3}` + "\n"))
		return
	}
	fl := w.(http.Flusher)
	write := func(s string) error {
		_, err := w.Write([]byte(s + "\n"))
		fl.Flush()
		return err
	}
	_ = write(`{"event":"decision","verdict":"allow","call_id":"c1"}`)
	if h.block {
		<-r.Context().Done()
		h.cancelled = true
		if write(`{"event":"output","stream":"stdout","data":"late"}`) == nil {
			h.body = "wrote after the reader stopped"
		}
		return
	}
	_ = write(`{"event":"output","stream":"stdout","data":"abc"}`)
	// One Write carrying two events and half of a third.
	_, _ = w.Write([]byte(`{"event":"output","stream":"stdout","data":"d"}` + "\n" + `{"event":"result","verdict":"allow",`))
	_ = write(`"bytes":4,"call_id":"c1"}`)
	_ = write(`{"event":"output","stream":"stdout","data":"after the result"}`)
}

// TestInProcessStream: StreamDirect on an in-process client runs the
// handler with the client's token and hands each event over as it is
// written, however the writes split the lines, and nothing after the
// result; Call gets the one result; an error status is an APIError.
func TestInProcessStream(t *testing.T) {
	h := &streamHandler{}
	c := NewInProcess("/run/sluice/sluice.sock", h)
	if err := c.SetToken("stk_abc"); err != nil {
		t.Fatal(err)
	}
	var got []string
	res, err := c.StreamDirect(context.Background(), api.CallRequest{Tool: "t", Args: json.RawMessage(`{}`)}, func(ev api.Event) error {
		got = append(got, string(ev.Event)+":"+ev.Data)
		return nil
	})
	if err != nil || res == nil || res.Bytes != 4 || res.CallID != "c1" {
		t.Fatalf("StreamDirect: %+v %v", res, err)
	}
	if want := "decision: output:abc output:d result:"; strings.Join(got, " ") != want {
		t.Fatalf("events %q, want %q", strings.Join(got, " "), want)
	}
	if h.path != "/v1/calls" || h.auth != "Bearer stk_abc" || !strings.Contains(h.body, `"stream":true`) {
		t.Fatalf("the handler saw %s %q %s", h.path, h.auth, h.body)
	}
	res, err = c.Call(context.Background(), api.CallRequest{Tool: "t", Args: json.RawMessage(`{}`)})
	if err != nil || res.Bytes != 3 {
		t.Fatalf("Call: %+v %v", res, err)
	}
	_, err = c.Call(context.Background(), api.CallRequest{Tool: "forbidden", Args: json.RawMessage(`{}`)})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || ae.Code != "forbidden" {
		t.Fatalf("a 403: %v", err)
	}
	ts, err := c.Tools(context.Background())
	if err != nil || len(ts.Tools) != 1 || ts.Tools[0].Name != "t" {
		t.Fatalf("Tools over the handler transport: %+v %v", ts, err)
	}
}

// TestInProcessStopEndsTheCall: an error from fn ends the handler's
// request context, as a dropped connection ends the call in sluiced, and
// the handler's writes fail from then on.
func TestInProcessStopEndsTheCall(t *testing.T) {
	h := &streamHandler{block: true}
	c := NewInProcess("s", h)
	stop := errors.New("stop")
	_, err := c.StreamDirect(context.Background(), api.CallRequest{Tool: "t", Args: json.RawMessage(`{}`)}, func(ev api.Event) error {
		if ev.Event == api.EventDecision {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || !h.cancelled || h.body == "wrote after the reader stopped" {
		t.Fatalf("err %v, handler cancelled %v, body %q", err, h.cancelled, h.body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h2 := &streamHandler{block: true}
	c2 := NewInProcess("s", h2)
	_, err = c2.StreamDirect(ctx, api.CallRequest{Tool: "t", Args: json.RawMessage(`{}`)}, func(ev api.Event) error {
		cancel() // the caller's context ends mid-call
		return nil
	})
	if !errors.Is(err, context.Canceled) || !h2.cancelled {
		t.Fatalf("cancelled ctx: err %v, handler cancelled %v", err, h2.cancelled)
	}
}
