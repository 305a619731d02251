package cli

import (
	"flag"
	"fmt"
	"log/slog"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sluicehq/sluice/mcp"
)

const mcpHelp = `Usage: sluice mcp [--socket PATH] [--task ID] [--token-file FILE]

Serve sluiced's tools to an MCP client over stdio (stdin/stdout are the
protocol; logs go to stderr). Configure the client to run
  {"command": "sluice", "args": ["mcp"]}
Its principal is the user that runs it: it can do nothing the socket
would not allow. It exits when stdin closes.

  --task ID   the task id of every call (recorded in the audit);
              "sluice tasks cancel ID" then ends this session's calls
  --token-file FILE
              present the delegation token in FILE on every request
              (docs/tokens.md): the session has the token's rights, never
              its user's own. FILE must not be readable by other users.
`

// mcp runs the MCP bridge until the client closes stdin.
func (e *env) mcp(args []string) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	task := fs.String("task", "", "the task id of every call")
	tokenFile := fs.String("token-file", "", "")
	pos, code, ok := e.parse(fs, args, mcpHelp)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		fmt.Fprint(e.stderr, mcpHelp)
		return ExitUsage
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, ok := e.tokenClient("mcp", *tokenFile)
	if !ok {
		return ExitUsage
	}
	b := mcp.New(mcp.Options{Socket: e.socket, Client: c, Logger: log, Task: *task})
	if err := b.Run(e.ctx, &sdk.StdioTransport{}); err != nil {
		fmt.Fprintf(e.stderr, "sluice mcp: %v\n", err)
		return ExitFailed
	}
	return ExitOK
}
