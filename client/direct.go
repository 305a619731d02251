package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/api"
)

// StreamDirect is Stream over the client's own persistent connections,
// written and read in the caller's goroutine: no connection setup per
// call once one is open, and none of net/http's per-connection reader and
// writer goroutines between the caller and the socket (each call's
// request is one write, its events are read where they are handed to fn).
// `sluice mcp` forwards every tools/call this way. The events' Raw is not
// set. When ctx ends before the result, the connection is closed, which
// ends the call in sluiced as a dropped stream does.
func (c *Client) StreamDirect(ctx context.Context, req api.CallRequest, fn func(api.Event) error) (*api.CallResult, error) {
	req.Stream = true
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	msg := make([]byte, 0, len(body)+128)
	msg = append(msg, "POST /v1/calls HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: "...)
	msg = strconv.AppendInt(msg, int64(len(body)), 10)
	msg = append(msg, "\r\n\r\n"...)
	msg = append(msg, body...)
	for {
		dc, reused, err := c.conn(ctx)
		if err != nil {
			return nil, fmt.Errorf("connect to sluiced at %s: %w", c.Socket, err)
		}
		res, sent, err := c.stream(ctx, dc, msg, fn)
		if err != nil && !sent && reused && ctx.Err() == nil {
			// sluiced closed this idle connection (it stopped, or it
			// was idle too long) before taking the request: nothing of
			// it was read, so it goes again on a new connection.
			continue
		}
		return res, err
	}
}

// directConn is one persistent connection of StreamDirect's, used by one
// call at a time.
type directConn struct {
	nc   net.Conn
	br   *bufio.Reader
	buf  []byte        // the event scanner's buffer, reused
	rest io.ReadCloser // the last response's body past its result event, not yet read to its end
	used time.Time
}

const (
	// maxIdleDirect bounds the idle connections StreamDirect keeps.
	maxIdleDirect = 8
	// maxIdleAge: an idle connection is not reused after this; sluiced
	// closes idle connections after 2 minutes.
	maxIdleAge = time.Minute
	// finishWait bounds the wait for the end of a reused connection's
	// previous response (sluiced ends it as soon as the call's handler
	// returns, which is at once after a read; an execute call's box is
	// let go first). Past it the connection is dropped, not waited on.
	finishWait = 5 * time.Millisecond
)

// aLongTimeAgo is a deadline in the past: it unblocks a read or write now.
var aLongTimeAgo = time.Unix(1, 0)

// conn returns an idle connection whose last response has ended, or a new one.
func (c *Client) conn(ctx context.Context) (*directConn, bool, error) {
	for {
		c.mu.Lock()
		n := len(c.idle)
		if n == 0 {
			c.mu.Unlock()
			break
		}
		dc := c.idle[n-1]
		c.idle[n-1] = nil
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		if time.Since(dc.used) < maxIdleAge && dc.finish() {
			return dc, true, nil
		}
		dc.nc.Close()
	}
	nc, err := c.dial(ctx)
	if err != nil {
		return nil, false, err
	}
	return &directConn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), buf: make([]byte, 64<<10)}, false, nil
}

// finish reads the last response to its end (a chunked body's last
// chunk, which follows the result event), so that the connection can
// carry the next request. False: it did not end in time, or the
// connection broke; drop it.
func (dc *directConn) finish() bool {
	if dc.rest == nil {
		return true
	}
	rest := dc.rest
	dc.rest = nil
	if dc.nc.SetReadDeadline(time.Now().Add(finishWait)) != nil {
		return false
	}
	var b [512]byte
	for total := 0; ; {
		n, err := rest.Read(b[:])
		total += n
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || total > 4<<10 {
			return false
		}
	}
	return dc.nc.SetReadDeadline(time.Time{}) == nil
}

// put keeps dc for the next call, or closes it.
func (c *Client) put(dc *directConn) {
	dc.used = time.Now()
	c.mu.Lock()
	if len(c.idle) < maxIdleDirect {
		c.idle = append(c.idle, dc)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	dc.nc.Close()
}

// stream sends msg on dc and reads its events. sent: the request was
// written whole (so it must not be sent again).
func (c *Client) stream(ctx context.Context, dc *directConn, msg []byte, fn func(api.Event) error) (res *api.CallResult, sent bool, err error) {
	if err := ctx.Err(); err != nil {
		dc.nc.Close()
		return nil, false, err
	}
	keep := false
	stop := context.AfterFunc(ctx, func() { _ = dc.nc.SetDeadline(aLongTimeAgo) })
	defer func() {
		if !stop() {
			// ctx ended: the deadline may be set, the call is dropped.
			keep = false
			if res == nil {
				err = ctx.Err()
			}
		}
		if keep {
			c.put(dc)
		} else {
			dc.nc.Close()
		}
	}()
	if _, err := dc.nc.Write(msg); err != nil {
		return nil, false, err
	}
	resp, err := http.ReadResponse(dc.br, &http.Request{Method: http.MethodPost})
	if err != nil {
		return nil, true, fmt.Errorf("connect to sluiced at %s: %w", c.Socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		data, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		keep = rerr == nil && !resp.Close && resp.ContentLength == int64(len(data))
		return nil, true, apiError(resp.StatusCode, data)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(dc.buf, 256<<20)
	for sc.Scan() {
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, true, fmt.Errorf("bad event from sluiced: %w", err)
		}
		if fn != nil {
			if err := fn(ev); err != nil {
				return nil, true, err
			}
		}
		if ev.Event == api.EventResult {
			r := ev.CallResult
			// The body's last chunk is read when dc is next used: by
			// then it has come, and this call's result is not held
			// back for it.
			dc.rest, keep = resp.Body, !resp.Close
			return &r, true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, true, err
	}
	return nil, true, errors.New("stream ended without a result event")
}
