//go:build unix

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
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/api"
)

// ErrAttachUnsupported: this sluiced serves no attached MCP sessions (it
// is older than POST /v1/mcp), or the connection cannot carry
// descriptors. `sluice mcp` then serves the session itself.
var ErrAttachUnsupported = errors.New("the MCP session was not attached")

// Attachment is an MCP session sluiced serves on the descriptors it was
// given (AttachMCP).
type Attachment struct {
	nc      net.Conn
	br      *bufio.Reader
	in, out *os.File
}

// AttachMCP hands in and out (the MCP client's stdin and stdout: pipes or
// sockets) to sluiced, which serves the MCP session on them as this
// client's peer, with its token, every call's task being task
// (docs/clients.md "Attached sessions"). It returns once sluiced took them;
// Wait then says how the session ended. An error wrapping
// ErrAttachUnsupported, or an APIError, means the session was not
// attached, and in and out are this process's, in blocking mode.
func (c *Client) AttachMCP(ctx context.Context, in, out *os.File, task string) (*Attachment, error) {
	nc, err := c.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to sluiced at %s: %w", c.Socket, err)
	}
	a, err := c.attach(ctx, nc, in, out, task)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return a, nil
}

func (c *Client) attach(ctx context.Context, nc net.Conn, in, out *os.File, task string) (*Attachment, error) {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("%w: the connection is not a unix socket", ErrAttachUnsupported)
	}
	if d, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(d)
	} else {
		_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	}
	body, err := json.Marshal(api.MCPAttachRequest{Task: task})
	if err != nil {
		return nil, err
	}
	var msg bytes.Buffer
	msg.WriteString("POST " + api.PathMCP + " HTTP/1.1\r\nHost: sluice\r\nConnection: Upgrade\r\nUpgrade: " + api.MCPUpgrade + "\r\n")
	if c.token != "" {
		msg.WriteString("Authorization: Bearer " + c.token + "\r\n")
	}
	msg.WriteString("Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	msg.Write(body)
	if _, err := nc.Write(msg.Bytes()); err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("%w (%s)", ErrAttachUnsupported, bytes.TrimSpace(b))
		}
		return nil, apiError(resp.StatusCode, b)
	}
	rights := syscall.UnixRights(int(in.Fd()), int(out.Fd()))
	if _, _, err := uc.WriteMsgUnix([]byte{0}, rights, nil); err != nil {
		return nil, fmt.Errorf("attach: passing stdin and stdout: %w", err)
	}
	st, err := readState(br)
	if err != nil || !st.Attached {
		// Not attached: the descriptors are this process's again, in
		// blocking mode whatever sluiced did with them.
		_ = syscall.SetNonblock(int(in.Fd()), false)
		_ = syscall.SetNonblock(int(out.Fd()), false)
	}
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	if !st.Attached {
		return nil, fmt.Errorf("%w: %s", ErrAttachUnsupported, st.Error)
	}
	_ = nc.SetDeadline(time.Time{})
	return &Attachment{nc: nc, br: br, in: in, out: out}, nil
}

func readState(br *bufio.Reader) (api.MCPAttachState, error) {
	var st api.MCPAttachState
	line, err := br.ReadBytes('\n')
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(line, &st); err != nil {
		return st, fmt.Errorf("sluiced's answer: %w", err)
	}
	return st, nil
}

// Wait returns how the session ended (api.MCPAttachState.End), or an
// error when sluiced's connection ended without saying (it went away).
func (a *Attachment) Wait() (api.MCPAttachState, error) {
	st, err := readState(a.br)
	if err == nil && st.End == "" {
		err = fmt.Errorf("sluiced ended the session without saying how")
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		err = fmt.Errorf("sluiced closed the session's connection: it stopped or crashed")
	}
	return st, err
}

// Close detaches: sluiced ends the session (closing its copies of the
// descriptors). sluiced made them non-blocking, and the open files are
// shared with whoever else holds them (a shell's pipeline): Close puts
// them back in blocking mode.
func (a *Attachment) Close() error {
	_ = syscall.SetNonblock(int(a.in.Fd()), false)
	_ = syscall.SetNonblock(int(a.out.Fd()), false)
	return a.nc.Close()
}
