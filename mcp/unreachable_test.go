package mcp

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestUnreachableSaysWhy: the error for a sluiced that cannot be reached
// names what the connection met. A connection sluiced closed unread (its
// per-uid cap, found by the fifth review) said "add the user to the
// group", which sent users after a permission problem they did not have.
func TestUnreachableSaysWhy(t *testing.T) {
	b := &Bridge{opts: Options{Socket: "/run/sluice/sluice.sock"}}
	wrap := func(err error) error {
		return &url.Error{Op: "Post", URL: "http://sluiced/v1/calls", Err: &net.OpError{Op: "read", Net: "unix",
			Err: os.NewSyscallError("read", err)}}
	}
	for _, c := range []struct {
		err       error
		want, not string
	}{
		{&url.Error{Op: "Post", URL: "http://sluiced/v1/calls", Err: io.EOF}, "closed the connection before answering", "usermod"},
		{wrap(syscall.ECONNRESET), "too many calls in flight", "usermod"},
		{wrap(syscall.EACCES), "may not open", "Is sluiced running"},
		{wrap(syscall.ECONNREFUSED), "Is sluiced running", "closed the connection"},
		{wrap(syscall.ENOENT), "Is sluiced running", "closed the connection"},
		{fmt.Errorf("something else"), "cannot reach sluiced", "closed the connection"},
	} {
		msg := b.unreachable(c.err).Message
		if !strings.Contains(msg, c.want) || strings.Contains(msg, c.not) || !strings.Contains(msg, b.opts.Socket) {
			t.Errorf("%v: %q, want it to say %q (and the socket), not %q", c.err, msg, c.want, c.not)
		}
	}
}
