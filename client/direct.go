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
	"net/http/httputil"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/api"
)

// StreamDirect is Stream over the client's own persistent connections (as
// Call is), written and read in the caller's goroutine: no connection setup per
// call once one is open, and none of net/http's per-connection reader and
// writer goroutines between the caller and the socket (each call's
// request is one write, its events are read where they are handed to fn).
// `sluice mcp` forwards every tools/call this way. The events' Raw is not
// set. When ctx ends before the result, the connection is closed, which
// ends the call in sluiced as a dropped stream does.
func (c *Client) StreamDirect(ctx context.Context, req api.CallRequest, fn func(api.Event) error) (*api.CallResult, error) {
	req.Stream = true
	return c.direct(ctx, req, fn)
}

// direct sends req over one of the client's persistent connections and
// reads its answer there: with req.Stream, its events (each handed to
// fn); without, its one JSON result.
func (c *Client) direct(ctx context.Context, req api.CallRequest, fn func(api.Event) error) (*api.CallResult, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if c.handler != nil {
		return c.inProcess(ctx, body, req.Stream, fn)
	}
	msg := make([]byte, 0, len(body)+128)
	msg = append(msg, "POST /v1/calls HTTP/1.1\r\nHost: sluice\r\n"...)
	if c.token != "" {
		msg = append(msg, "Authorization: Bearer "+c.token+"\r\n"...)
	}
	msg = append(msg, "Content-Type: application/json\r\nContent-Length: "...)
	msg = strconv.AppendInt(msg, int64(len(body)), 10)
	msg = append(msg, "\r\n\r\n"...)
	msg = append(msg, body...)
	for {
		dc, reused, err := c.conn(ctx)
		if err != nil {
			return nil, fmt.Errorf("connect to sluiced at %s: %w", c.Socket, err)
		}
		res, sent, err := c.stream(ctx, dc, msg, req.Stream, fn)
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
	buf  []byte    // the event scanner's buffer, reused
	rest io.Reader // the last response's body past its result event, not yet read to its end
	used time.Time
}

const (
	// maxIdleDirect bounds the idle connections Call and StreamDirect
	// keep (as many as the client's net/http transport keeps).
	maxIdleDirect = 64
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

// stream sends msg on dc and reads its answer: its events if streamed,
// else its one result. sent: the request was written whole (so it must
// not be sent again).
func (c *Client) stream(ctx context.Context, dc *directConn, msg []byte, streamed bool, fn func(api.Event) error) (res *api.CallResult, sent bool, err error) {
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
	h, err := readHead(dc.br)
	if err != nil {
		return nil, true, fmt.Errorf("connect to sluiced at %s: %w", c.Socket, err)
	}
	body := h.body(dc.br)
	if h.status != http.StatusOK {
		data, rerr := io.ReadAll(io.LimitReader(body, 1<<20))
		keep = rerr == nil && !h.close && h.length == int64(len(data))
		return nil, true, apiError(h.status, data)
	}
	if !streamed {
		var r api.CallResult
		if err := json.NewDecoder(body).Decode(&r); err != nil {
			return nil, true, fmt.Errorf("bad result from sluiced: %w", err)
		}
		// The rest of the body (a newline; with chunked framing, its
		// last chunk) is read when dc is next used, as a stream's.
		dc.rest, keep = body, !h.close && h.length != -1
		return &r, true, nil
	}
	sc := bufio.NewScanner(body)
	sc.Buffer(dc.buf, 256<<20)
	for sc.Scan() {
		var ev api.Event
		if err := decodeEvent(sc.Bytes(), &ev); err != nil {
			return nil, true, fmt.Errorf("bad event from sluiced: %w", err)
		}
		if fn != nil {
			if err := fn(ev); err != nil {
				return nil, true, err
			}
		}
		if ev.Event == api.EventResult {
			r := ev.CallResult
			// What is left of the body (with chunked framing, its last
			// chunk) is read when dc is next used: by then it has come,
			// and this call's result is not held back for it.
			dc.rest, keep = body, !h.close && h.length != -1
			return &r, true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, true, err
	}
	return nil, true, errors.New("stream ended without a result event")
}

// head is what StreamDirect reads of a response's status line and header:
// sluiced's responses are HTTP/1.1 with a Content-Length or chunked.
type head struct {
	status  int
	length  int64 // the body's length; -1: until the connection closes
	chunked bool
	close   bool // the connection ends with this response
}

// readHead reads a response's status line and header fields from br,
// keeping only the fields that frame the body.
func readHead(br *bufio.Reader) (head, error) {
	h := head{length: -1}
	line, err := br.ReadSlice('\n')
	if err != nil {
		return h, err
	}
	line = bytes.TrimRight(line, "\r\n")
	proto, rest, _ := bytes.Cut(line, []byte(" "))
	code, _, _ := bytes.Cut(rest, []byte(" "))
	if !bytes.HasPrefix(proto, []byte("HTTP/1.")) || len(code) != 3 {
		return h, fmt.Errorf("malformed HTTP response %q", line)
	}
	if h.status, err = strconv.Atoi(string(code)); err != nil || h.status < 200 {
		return h, fmt.Errorf("malformed HTTP status %q", line)
	}
	h.close = string(proto) == "HTTP/1.0"
	for n := 0; ; n++ {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return h, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		if n > 100 {
			return h, errors.New("too many HTTP header fields")
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return h, fmt.Errorf("malformed HTTP header field %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if h.length, err = strconv.ParseInt(string(value), 10, 64); err != nil || h.length < 0 {
				return h, fmt.Errorf("malformed Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if !bytes.EqualFold(value, []byte("chunked")) {
				return h, fmt.Errorf("unsupported Transfer-Encoding %q", value)
			}
			h.chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				h.close = true
			}
		}
	}
	if h.chunked {
		h.length = 0 // framed by its chunks: neither counted nor till close
	}
	return h, nil
}

// body reads the response's body from br and ends (io.EOF) where it
// does, the connection then at the next response.
func (h head) body(br *bufio.Reader) io.Reader {
	switch {
	case h.chunked:
		return &chunkedBody{r: httputil.NewChunkedReader(br), br: br}
	case h.length >= 0:
		return io.LimitReader(br, h.length)
	}
	return br
}

// chunkedBody is a chunked body to its end: its chunks, then the trailer
// after the last one (net/http's reader stops before it).
type chunkedBody struct {
	r   io.Reader
	br  *bufio.Reader
	end error
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.end != nil {
		return 0, b.end
	}
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) {
		err = readTrailer(b.br)
		if err == nil {
			err = io.EOF
		}
		b.end = err
	}
	return n, err
}

func readTrailer(br *bufio.Reader) error {
	for n := 0; n < 100; n++ {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
	return errors.New("too many HTTP trailer fields")
}
