package client

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice/api"
)

// Status is GET /v1/status: calls in flight, parked approvals, pools and
// recent denials; the caller's own, an approver's everyone's.
func (c *Client) Status(ctx context.Context) (*api.Status, error) {
	var s api.Status
	return &s, c.getJSON(ctx, http.MethodGet, "/v1/status", nil, &s)
}

// Tasks is GET /v1/tasks: the tasks the daemon remembers, the caller's
// own (an approver's: everyone's), with their generation and calls in
// flight.
func (c *Client) Tasks(ctx context.Context) (*api.Tasks, error) {
	var t api.Tasks
	return &t, c.getJSON(ctx, http.MethodGet, "/v1/tasks", nil, &t)
}
