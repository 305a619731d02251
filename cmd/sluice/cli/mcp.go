package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/mcp"
)

const mcpHelp = `Usage: sluice mcp [--socket PATH] [--task ID] [--token-file FILE] [--local]

Serve sluiced's tools to an MCP client over stdio (stdin/stdout are the
protocol; logs go to stderr). Configure the client to run
  {"command": "sluice", "args": ["mcp"]}
Its principal is the user that runs it: it can do nothing the socket
would not allow. It exits when stdin closes.

When stdin and stdout are pipes or sockets (as MCP clients start it),
it hands them to sluiced over the socket and waits: sluiced serves the
session itself, as this user (docs/clients.md "Attached sessions"), and each
call skips a process. Otherwise, or when sluiced cannot take them, this
process serves the session.

  --task ID   the task id of every call (recorded in the audit);
              "sluice tasks cancel ID" then ends this session's calls
  --token-file FILE
              present the delegation token in FILE on every request
              (docs/tokens.md): the session has the token's rights, never
              its user's own. FILE must not be readable by other users.
  --local     serve the session in this process, never attached
`

// mcp runs the MCP bridge until the client closes stdin.
func (e *env) mcp(args []string) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	task := fs.String("task", "", "the task id of every call")
	tokenFile := fs.String("token-file", "", "")
	local := fs.Bool("local", false, "")
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
	var a *client.Attachment
	aerr := errors.New("--local")
	if !*local {
		a, aerr = c.AttachMCP(e.ctx, os.Stdin, os.Stdout, *task)
	}
	var err error
	if aerr != nil {
		// Not attached (an older sluiced, stdin or stdout not a pipe or a
		// socket, sluiced not reachable): this process serves the
		// session, and each request says what is wrong with sluiced.
		log.Info("serving the MCP session in this process", "why", aerr.Error())
		err = b.Run(e.ctx, &sdk.StdioTransport{})
	} else {
		h, code := e.attached(a)
		if h == nil {
			return code
		}
		// sluiced stopped and handed the session back: served here
		// from its next message on (each call then says whether
		// sluiced is back).
		log.Info("sluiced is stopping: serving the MCP session in this process from here on")
		err = b.Resume(e.ctx, os.Stdin, os.Stdout, h)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice mcp: %v\n", err)
		return ExitFailed
	}
	return ExitOK
}

// attached waits for the session sluiced serves: until it ends, or this
// process is told to stop (which detaches it: sluiced ends the session).
// A session sluiced handed back as it stopped is returned, to be served
// on here.
func (e *env) attached(a *client.Attachment) (*mcp.Handoff, int) {
	type end struct {
		st  api.MCPAttachState
		err error
	}
	done := make(chan end, 1)
	go func() {
		st, err := a.Wait()
		done <- end{st, err}
	}()
	select {
	case <-e.ctx.Done():
		a.Close()
		return nil, ExitOK
	case r := <-done:
		a.Close()
		switch {
		case r.err != nil:
			fmt.Fprintf(e.stderr, "sluice mcp: %v; the MCP client must start sluice mcp again\n", r.err)
			return nil, ExitFailed
		case r.st.End == api.MCPEndStopping && r.st.Handoff != nil:
			h := &mcp.Handoff{Rest: r.st.Handoff.Rest}
			if len(r.st.Handoff.State) > 0 {
				if err := json.Unmarshal(r.st.Handoff.State, &h.State); err != nil {
					fmt.Fprintf(e.stderr, "sluice mcp: the session sluiced handed back: %v; the MCP client must start sluice mcp again\n", err)
					return nil, ExitFailed
				}
			}
			return h, ExitOK
		case r.st.End == api.MCPEndStopping:
			fmt.Fprintln(e.stderr, "sluice mcp: sluiced stopped, ending the session; the MCP client must start sluice mcp again")
			return nil, ExitFailed
		case r.st.End == api.MCPEndError:
			fmt.Fprintf(e.stderr, "sluice mcp: %s\n", r.st.Error)
			return nil, ExitFailed
		}
		return nil, ExitOK
	}
}
