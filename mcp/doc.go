// Package mcp is the bridge behind `sluice mcp`: an MCP server over stdio
// (the official github.com/modelcontextprotocol/go-sdk) that any MCP
// client launches, and that is only a client of sluiced's socket (api and
// client). Its principal is the uid that runs it, as SO_PEERCRED tells the
// daemon, so it can do nothing the socket would not allow: it lists the
// tools that principal may call, forwards each tools/call as a streamed
// POST /v1/calls, turns notifications/cancelled into POST
// /v1/calls/{id}/cancel, and follows GET /v1/events to send
// tools/list_changed after a reload (docs/api.md). Like any client it sits
// above the layers of docs/design.md §2 and imports only api and client.
//
// Everything a tool returns is untrusted data (file contents, command
// output); the server's instructions tell the model so. Logs go to stderr:
// stdout is the protocol.
package mcp
