package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/sluicehq/sluice/api"
)

// Client talks to one sluiced socket. It is safe for concurrent use and
// keeps connections alive between calls.
type Client struct {
	Socket string
	http   *http.Client
	dial   func(ctx context.Context) (net.Conn, error)
	// handler, when set (NewInProcess), serves every request in this
	// process.
	handler http.Handler

	mu   sync.Mutex
	idle []*directConn // StreamDirect's idle connections

	// token, when set (SetToken), is sent as "Authorization: Bearer" on
	// every request.
	token string
}

// SocketFromEnv returns $SLUICE_SOCKET, else the default socket.
func SocketFromEnv() string {
	if s := os.Getenv("SLUICE_SOCKET"); s != "" {
		return s
	}
	return api.DefaultSocket
}

// New returns a client for the socket at path.
func New(socket string) *Client {
	return NewWithDialer(socket, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	})
}

// NewWithDialer returns a client whose connections come from dial (tests
// connect as another uid this way).
func NewWithDialer(socket string, dial func(ctx context.Context) (net.Conn, error)) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx)
		},
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Client{Socket: socket, http: &http.Client{Transport: tr}, dial: dial}
}

// Close drops idle connections.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, dc := range idle {
		dc.nc.Close()
	}
}

// APIError is a non-decision error from the daemon (400, 403, 413, …).
type APIError struct {
	Status int
	Code   string
	Msg    string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("sluiced: %d %s: %s", e.Status, e.Code, e.Msg)
}

func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://sluice"+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("connect to sluiced at %s: %w", c.Socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, apiError(resp.StatusCode, data)
	}
	return resp, nil
}

// apiError is the APIError of a non-200 response with body data.
func apiError(status int, data []byte) *APIError {
	var eb api.ErrorBody
	if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" {
		eb.Error = api.ErrorDetail{Code: http.StatusText(status), Message: string(data)}
	}
	return &APIError{Status: status, Code: eb.Error.Code, Msg: eb.Error.Message}
}

func (c *Client) getJSON(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

// Call sends one call and returns its decided result (allowed or denied).
// It goes over the client's own persistent connections, written and read
// in the caller's goroutine, as StreamDirect's: none of net/http's
// per-connection goroutines between the caller and the socket (~0.2 ms a
// call on a 2-vCPU VM, docs/performance.md).
func (c *Client) Call(ctx context.Context, req api.CallRequest) (*api.CallResult, error) {
	req.Stream = false
	return c.direct(ctx, req, nil)
}

// CallRaw posts an arbitrary body (for tests of malformed input) and
// returns the status and body.
func (c *Client) CallRaw(ctx context.Context, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://sluice/v1/calls", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// Stream sends a call with stream true and hands each event to fn as it
// arrives. It returns the final result event's fields.
func (c *Client) Stream(ctx context.Context, req api.CallRequest, fn func(api.Event) error) (*api.CallResult, error) {
	req.Stream = true
	resp, err := c.do(ctx, http.MethodPost, "/v1/calls", req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	for sc.Scan() {
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("bad event from sluiced: %w", err)
		}
		ev.Raw = append(json.RawMessage(nil), sc.Bytes()...)
		if fn != nil {
			if err := fn(ev); err != nil {
				return nil, err
			}
		}
		if ev.Event == api.EventResult {
			res := ev.CallResult
			return &res, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("stream ended without a result event")
}

// Health returns the daemon's health.
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	var h api.Health
	return &h, c.getJSON(ctx, http.MethodGet, "/v1/health", nil, &h)
}

// Tools returns the tools this caller may use.
func (c *Client) Tools(ctx context.Context) (*api.Tools, error) {
	var t api.Tools
	return &t, c.getJSON(ctx, http.MethodGet, "/v1/tools", nil, &t)
}

// Reload asks the daemon to reload its manifest (approvers only).
func (c *Client) Reload(ctx context.Context) (*api.Health, error) {
	var h api.Health
	return &h, c.getJSON(ctx, http.MethodPost, "/v1/reload", nil, &h)
}

// Approvals lists the calls waiting for a human (approvers only).
func (c *Client) Approvals(ctx context.Context) (*api.Approvals, error) {
	var a api.Approvals
	return &a, c.getJSON(ctx, http.MethodGet, "/v1/approvals", nil, &a)
}

// Decide approves or denies a parked call (approvers only).
func (c *Client) Decide(ctx context.Context, approvalID string, approve bool, note string) (*api.ApprovalOutcome, error) {
	return c.DecideWith(ctx, approvalID, api.ApprovalDecision{Approve: approve, Note: note})
}

// DecideWith is Decide with a whole decision: an approval may carry a
// grant (later calls of the same tool, principal and task run without
// approval for some minutes). With a tool's approvers N, an approval
// that is not the N-th comes back Waiting.
func (c *Client) DecideWith(ctx context.Context, approvalID string, d api.ApprovalDecision) (*api.ApprovalOutcome, error) {
	var o api.ApprovalOutcome
	return &o, c.getJSON(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(approvalID), d, &o)
}

// CancelTask cancels a task: its calls in flight end task_cancelled, and
// new calls with it are denied for the daemon's task TTL.
func (c *Client) CancelTask(ctx context.Context, task string) (*api.TaskCancel, error) {
	var t api.TaskCancel
	return &t, c.getJSON(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(task)+"/cancel", nil, &t)
}

// CancelCall ends one call in flight (the caller's own; an approver's any)
// with reason cancelled. An unknown id, or another principal's call, is a
// 404 APIError.
func (c *Client) CancelCall(ctx context.Context, callID string) (*api.CallCancel, error) {
	var cc api.CallCancel
	return &cc, c.getJSON(ctx, http.MethodPost, "/v1/calls/"+url.PathEscape(callID)+"/cancel", nil, &cc)
}

// ErrEventsEnded: the daemon ended the event stream (it stopped, or
// dropped a follower that fell behind).
var ErrEventsEnded = errors.New("sluiced ended the event stream")

// Events follows GET /v1/events, handing each event to fn as it arrives
// (the first is "subscribed", with the policy version in force). It
// returns fn's error, ctx's, or ErrEventsEnded when the daemon ends the
// stream (it stopped, or dropped this follower).
func (c *Client) Events(ctx context.Context, fn func(api.DaemonEvent) error) error {
	resp, err := c.do(ctx, http.MethodGet, "/v1/events", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev api.DaemonEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("bad event from sluiced: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("event stream from sluiced at %s: %w", c.Socket, err)
	}
	return ErrEventsEnded
}
