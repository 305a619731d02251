//go:build !unix

package client

import (
	"context"
	"errors"
	"os"

	"github.com/sluicehq/sluice/api"
)

// ErrAttachUnsupported: attached MCP sessions need a unix socket.
var ErrAttachUnsupported = errors.New("the MCP session was not attached")

// Attachment is an MCP session sluiced serves (unix only).
type Attachment struct{}

// AttachMCP is unix only.
func (c *Client) AttachMCP(ctx context.Context, in, out *os.File, task string) (*Attachment, error) {
	return nil, ErrAttachUnsupported
}

// Wait is unix only.
func (a *Attachment) Wait() (api.MCPAttachState, error) {
	return api.MCPAttachState{}, ErrAttachUnsupported
}

// Close is unix only.
func (a *Attachment) Close() error { return nil }
