package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
)

const tokenHelp = `Usage: sluice token create --tools A,B [--roots DIR,...] [--task T] [--ttl 30m] [--peer-uid N] [--subject NAME] [--json]
       sluice token list [--json]
       sluice token revoke ID

Delegation tokens: hand a sub-agent less than yourself (docs/tokens.md).

create   Mint a token that can only narrow your own rights: the tools it may
         call (each one you may call), optionally roots beneath those tools'
         roots (relative to the manifest's base, as in the manifest), a task
         its calls are pinned to, a lifetime (default 1h, at most 24h) and
         the one peer uid that may present it. Prints the token once on
         stdout (its id and expiry on stderr; --json: all three as JSON).
         Give it to the sub-agent in a file only it can read:
           sluice token create --tools read_file --roots workspace/src/pkg > tok && chmod 600 tok
           sluice mcp --token-file tok
list     Your live tokens (an approver: everyone's), never their secrets.
revoke   Revoke a token by id (yours; an approver: anyone's).

Cancelling a token's task (sluice tasks cancel T) revokes it too.
`

// token is `sluice token create|list|revoke`.
func (e *env) token(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, tokenHelp)
		return ExitUsage
	}
	switch args[0] {
	case "create":
		return e.tokenCreate(args[1:])
	case "list":
		return e.tokenList(args[1:])
	case "revoke":
		return e.tokenRevoke(args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(e.stdout, tokenHelp)
		return ExitOK
	}
	fmt.Fprintf(e.stderr, "sluice token: unknown subcommand %q\n\n%s", args[0], tokenHelp)
	return ExitUsage
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (e *env) tokenCreate(args []string) int {
	fs := flag.NewFlagSet("token create", flag.ContinueOnError)
	tools := fs.String("tools", "", "")
	roots := fs.String("roots", "", "")
	task := fs.String("task", "", "")
	ttl := fs.Duration("ttl", 0, "")
	peerUID := fs.String("peer-uid", "", "")
	subject := fs.String("subject", "", "")
	asJSON := fs.Bool("json", false, "")
	pos, code, ok := e.parse(fs, args, tokenHelp)
	if !ok {
		return code
	}
	if len(pos) != 0 || *tools == "" {
		fmt.Fprintf(e.stderr, "sluice token create: --tools is required, and nothing else\n\n%s", tokenHelp)
		return ExitUsage
	}
	if *ttl < 0 || *ttl%time.Second != 0 {
		fmt.Fprintln(e.stderr, "sluice token create: --ttl is a positive whole number of seconds (30m, 2h, 90s)")
		return ExitUsage
	}
	req := api.TokenRequest{Tools: splitList(*tools), Roots: splitList(*roots), Task: *task,
		TTLSeconds: int64(*ttl / time.Second), Subject: *subject}
	if *peerUID != "" {
		n, err := strconv.ParseUint(*peerUID, 10, 32)
		if err != nil {
			fmt.Fprintf(e.stderr, "sluice token create: --peer-uid %q is not a uid\n", *peerUID)
			return ExitUsage
		}
		u := uint32(n)
		req.PeerUID = &u
	}
	c := e.client()
	defer c.Close()
	tc, err := c.CreateToken(e.ctx, req)
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice token create: %v\n", err)
		return ExitUsage
	}
	if *asJSON {
		b, _ := json.MarshalIndent(tc, "", "  ")
		fmt.Fprintln(e.stdout, string(b))
		return ExitOK
	}
	fmt.Fprintln(e.stdout, tc.Token)
	fmt.Fprintf(e.stderr, "token %s, expires %s (shown once: keep it in a file only the sub-agent can read)\n", tc.ID, tc.ExpiresAt)
	return ExitOK
}

func (e *env) tokenList(args []string) int {
	fs := flag.NewFlagSet("token list", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "")
	pos, code, ok := e.parse(fs, args, tokenHelp)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		fmt.Fprint(e.stderr, tokenHelp)
		return ExitUsage
	}
	c := e.client()
	defer c.Close()
	ts, err := c.Tokens(e.ctx)
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice token list: %v\n", err)
		return ExitUsage
	}
	if *asJSON {
		b, _ := json.MarshalIndent(ts, "", "  ")
		fmt.Fprintln(e.stdout, string(b))
		return ExitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tMINTER\tSUBJECT\tTOOLS\tROOTS\tTASK\tPEER UID\tEXPIRES")
	for _, t := range ts.Tokens {
		uid := "any"
		if t.PeerUID != nil {
			uid = strconv.FormatUint(uint64(*t.PeerUID), 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, safeLine(t.Minter), safeLine(t.Subject), safeLine(strings.Join(t.Tools, ",")),
			safeLine(strings.Join(t.Roots, ",")), safeLine(t.Task), uid, t.ExpiresAt)
	}
	tw.Flush()
	return ExitOK
}

func (e *env) tokenRevoke(args []string) int {
	fs := flag.NewFlagSet("token revoke", flag.ContinueOnError)
	pos, code, ok := e.parse(fs, args, tokenHelp)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintf(e.stderr, "sluice token revoke: want one ID\n\n%s", tokenHelp)
		return ExitUsage
	}
	c := e.client()
	defer c.Close()
	if _, err := c.RevokeToken(e.ctx, pos[0]); err != nil {
		fmt.Fprintf(e.stderr, "sluice token revoke: %v\n", err)
		return ExitUsage
	}
	fmt.Fprintf(e.stdout, "revoked %s\n", pos[0])
	return ExitOK
}

// tokenClient is a client of the socket that presents the token in
// file (--token-file), or e.client() when file is "".
func (e *env) tokenClient(cmd, file string) (*client.Client, bool) {
	c := e.client()
	if file == "" {
		return c, true
	}
	tok, err := client.ReadTokenFile(file)
	if err == nil {
		err = c.SetToken(tok)
	}
	if err != nil {
		c.Close()
		fmt.Fprintf(e.stderr, "sluice %s: %v\n", cmd, err)
		return nil, false
	}
	return c, true
}
