package api

import "encoding/json"

// PathMCP is the endpoint `sluice mcp` attaches its session to
// (docs/clients.md "Attached sessions"): POST an MCPAttachRequest; sluiced
// answers 101 Switching Protocols (Upgrade: sluice-mcp), then takes the
// client's stdin and stdout in one SCM_RIGHTS message and writes
// MCPAttachState lines on the connection: one when the session is
// attached (or why not), one when it ends.
const PathMCP = "/v1/mcp"

// MCPUpgrade is the protocol named in the attach's Upgrade header.
const MCPUpgrade = "sluice-mcp"

// MCPAttachRequest is the body of POST /v1/mcp.
type MCPAttachRequest struct {
	// Task, when set, is the task id of every call of the session.
	Task string `json:"task,omitempty"`
}

// MCPAttachState is a line sluiced writes on an attached session's
// connection.
type MCPAttachState struct {
	// Attached: sluiced took the descriptors and serves the session.
	Attached bool `json:"attached,omitempty"`
	// End says why the session ended: one of the MCPEnd constants.
	End string `json:"end,omitempty"`
	// Error says why the descriptors were refused, or what ended the
	// session when End is "error".
	Error string `json:"error,omitempty"`
	// Handoff, when sluiced stopped (End "stopping"), is the session
	// handed back to `sluice mcp`, which serves it on.
	Handoff *MCPHandoff `json:"handoff,omitempty"`
}

// MCPHandoff is an attached session handed back when sluiced stops.
type MCPHandoff struct {
	// State is the MCP SDK's session state (initialize's parameters),
	// absent when the session was not initialized yet.
	State json.RawMessage `json:"state,omitempty"`
	// Rest is what sluiced read of the client's next message.
	Rest []byte `json:"rest,omitempty"`
}

// How an attached MCP session ended (MCPAttachState.End).
const (
	MCPEndEOF      = "eof"      // the client closed stdin
	MCPEndStopping = "stopping" // sluiced is stopping
	MCPEndDetached = "detached" // `sluice mcp` went away
	MCPEndError    = "error"    // Error says what
)
