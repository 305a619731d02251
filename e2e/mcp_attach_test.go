//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/testutil"
)

// mcpProc is a `sluice mcp` driven over raw pipes, a JSON-RPC line at a
// time, as an MCP client drives it.
type mcpProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *testutil.LockedBuffer
	lines  chan []byte   // stdout's lines; closed at its EOF
	done   chan struct{} // closed when the process exited, err its status
	err    error
	next   int
}

func startMCP(t *testing.T, cmd *exec.Cmd) *mcpProc {
	t.Helper()
	p := &mcpProc{t: t, cmd: cmd, stderr: &testutil.LockedBuffer{}, lines: make(chan []byte, 16), done: make(chan struct{})}
	cmd.Stderr = p.stderr
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		br := bufio.NewReader(stdout)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				p.lines <- line
			}
			if err != nil {
				close(p.lines)
				return
			}
		}
	}()
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.in.Close()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
	})
	return p
}

// request sends method with params and returns the response's result
// (or error) as raw JSON.
func (p *mcpProc) request(method string, params any) (result, rpcErr json.RawMessage) {
	p.t.Helper()
	p.next++
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": p.next, "method": method, "params": params})
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("%s: write: %v\n%s", method, err, p.stderr)
	}
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("%s: stdout ended\n%s", method, p.stderr)
			}
			var m struct {
				ID     *int            `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			if json.Unmarshal(line, &m) == nil && m.ID != nil && *m.ID == p.next {
				return m.Result, m.Error
			}
		case <-timeout:
			p.t.Fatalf("%s: no response in 60 s\n%s", method, p.stderr)
		}
	}
}

func (p *mcpProc) notify(method string) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method})
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatal(err)
	}
}

func (p *mcpProc) initialize() {
	p.t.Helper()
	res, rerr := p.request("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "e2e", "version": "0"}})
	if rerr != nil || !bytes.Contains(res, []byte(`"sluice"`)) {
		p.t.Fatalf("initialize: %s %s\n%s", res, rerr, p.stderr)
	}
	p.notify("notifications/initialized")
}

// callText calls tool and returns its first text content and isError.
func (p *mcpProc) callText(tool string, args any) (string, bool) {
	p.t.Helper()
	res, rerr := p.request("tools/call", map[string]any{"name": tool, "arguments": args})
	if rerr != nil {
		return string(rerr), true
	}
	var r struct {
		Content []struct{ Text string } `json:"content"`
		IsError bool                    `json:"isError"`
	}
	if err := json.Unmarshal(res, &r); err != nil || len(r.Content) == 0 {
		p.t.Fatalf("tools/call %s: %s %v", tool, res, err)
	}
	return r.Content[0].Text, r.IsError
}

// stdoutEOF waits (at most 60 s) for stdout's end: every process that
// held its write end closed it.
func (p *mcpProc) stdoutEOF() bool {
	_, closed := p.scan(func([]byte) bool { return false })
	return closed
}

// scan reads stdout's lines until one matches (found), stdout ends
// (closed), or 60 s pass.
func (p *mcpProc) scan(match func(line []byte) bool) (found, closed bool) {
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				return false, true
			}
			if match(line) {
				return true, false
			}
		case <-timeout:
			return false, false
		}
	}
}

// holdsPipeOf reports whether process pid holds the pipe or socket that is
// fd of process other: the kernel's evidence that sluiced took it.
func holdsPipeOf(t *testing.T, pid, other, fd int) bool {
	t.Helper()
	want, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", other, fd))
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); err == nil && l == want {
			return true
		}
	}
	return false
}

// TestMCPAttachedSession: `sluice mcp` run by an agent's uid hands its
// stdin and stdout to sluiced (which then holds both: the kernel's
// /proc says so) and the session is that uid's, not sluiced's: it lists
// and calls only the agent principal's tools, the ledger names the agent
// and its uid, and a tool only root's principal has is refused. Closing
// stdin ends the session and `sluice mcp` exits 0.
func TestMCPAttachedSession(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	m := writeFile(t, fx.Base, "attach.json", `{"schema_version":1,
	  "principals":{"agent":{"uids":[65534],"tools":["read_src"]},"ops":{"uids":[0],"approver":true,"tools":["*"]}},
	  "tools":{"read_src":{"operation":"read","roots":["workspace/src"]},
	           "read_all":{"operation":"read","roots":["workspace"]}}}`)
	d := startOwnDaemon(t, m)
	openSocket(t, d)
	p := startMCP(t, agentCLI(t, d.socket, "mcp", "--socket", d.socket))
	p.initialize()
	if !holdsPipeOf(t, d.cmd.Process.Pid, p.cmd.Process.Pid, 0) || !holdsPipeOf(t, d.cmd.Process.Pid, p.cmd.Process.Pid, 1) {
		t.Fatalf("sluiced does not hold sluice mcp's stdin and stdout: not attached\n%s", p.stderr)
	}
	if out, _, code := sluice(t, d.socket, "status"); code != 0 || !strings.Contains(out, "attached MCP sessions: 1\n") {
		t.Fatalf("sluice status as an approver, one session attached: %d\n%s", code, out)
	}
	lt, rerr := p.request("tools/list", map[string]any{})
	if rerr != nil || !bytes.Contains(lt, []byte(`"read_src"`)) || bytes.Contains(lt, []byte(`"read_all"`)) {
		t.Fatalf("tools/list as the agent: %s %s", lt, rerr)
	}
	if text, isErr := p.callText("read_src", map[string]any{"path": "workspace/src/a.py"}); isErr || text != "print('hello')\n" {
		t.Fatalf("read_src: %q %v\n%s", text, isErr, p.stderr)
	}
	if text, isErr := p.callText("read_all", map[string]any{"path": "workspace/src/a.py"}); !isErr || strings.Contains(text, "hello") {
		t.Fatalf("read_all, a tool only root's principal has: %q %v", text, isErr)
	}
	var found bool
	for _, rec := range ledgerRecords(t, d.ledger()) {
		if rec.Tool == "read_src" && rec.Principal != nil {
			found = true
			if rec.Principal.Name != "agent" || rec.Principal.UID != 65534 || rec.Principal.PID != int32(p.cmd.Process.Pid) {
				t.Fatalf("read_src's record names %+v, want the agent, uid 65534, pid %d", *rec.Principal, p.cmd.Process.Pid)
			}
		}
	}
	if !found {
		t.Fatal("no record of read_src names a principal")
	}
	p.in.Close()
	if !p.stdoutEOF() {
		t.Fatal("stdout did not end after stdin closed")
	}
	if <-p.done; p.err != nil {
		t.Fatalf("sluice mcp after stdin closed: %v\n%s", p.err, p.stderr)
	}
}

// TestMCPAttachedEnds: an attached session ends with whichever side
// goes first. `sluice mcp` killed: sluiced closes its copies of the
// descriptors (the client's stdout reaches EOF). sluiced stopped: it
// hands the session back, with what it had read of the next message,
// and `sluice mcp` serves it on: once sluiced is back, the tools are
// listed again (tools/list_changed) and that message, finished by the
// client, is answered.
func TestMCPAttachedEnds(t *testing.T) {
	fx := escapetest.Build(t)
	d := startOwnDaemon(t, fx.Manifest)
	bin := filepath.Join(binDir, "sluice")

	p := startMCP(t, exec.Command(bin, "mcp", "--socket", d.socket))
	p.initialize()
	if !holdsPipeOf(t, d.cmd.Process.Pid, p.cmd.Process.Pid, 1) {
		t.Fatalf("not attached\n%s", p.stderr)
	}
	p.cmd.Process.Kill()
	<-p.done
	if !p.stdoutEOF() {
		t.Fatal("sluiced kept the session's stdout after sluice mcp was killed")
	}

	q := startMCP(t, exec.Command(bin, "mcp", "--socket", d.socket))
	q.initialize()
	if text, isErr := q.callText("read_file", map[string]any{"path": "workspace/src/a.py"}); isErr || text != "print('hello')\n" {
		t.Fatalf("read_file: %q %v", text, isErr)
	}
	// Half a message is in sluiced's hands when it stops.
	msg := `{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"workspace/src/a.py"}}}` + "\n"
	if _, err := q.in.Write([]byte(msg[:40])); err != nil {
		t.Fatal(err)
	}
	d.stop()
	d.start()
	if !q.waitFor(`"notifications/tools/list_changed"`) {
		t.Fatalf("no tools/list_changed once sluiced was back\n%s", q.stderr)
	}
	if !strings.Contains(q.stderr.String(), "serving the MCP session in this process from here on") {
		t.Fatalf("sluice mcp does not say it took the session over:\n%s", q.stderr)
	}
	if _, err := q.in.Write([]byte(msg[40:])); err != nil {
		t.Fatal(err)
	}
	if !q.waitFor(`"id":77,"result"`, `print('hello')`) {
		t.Fatalf("the message sluiced had half of was not answered\n%s", q.stderr)
	}
	if text, isErr := q.callText("read_file", map[string]any{"path": "workspace/src/a.py"}); isErr || text != "print('hello')\n" {
		t.Fatalf("read_file after the handoff: %q %v\n%s", text, isErr, q.stderr)
	}
	q.in.Close()
	if <-q.done; q.err != nil {
		t.Fatalf("sluice mcp after stdin closed: %v\n%s", q.err, q.stderr)
	}
}

// waitFor waits (at most 60 s) for a line of stdout holding every one of
// subs.
func (p *mcpProc) waitFor(subs ...string) bool {
	found, _ := p.scan(func(line []byte) bool {
		for _, s := range subs {
			if !bytes.Contains(line, []byte(s)) {
				return false
			}
		}
		return true
	})
	return found
}

// TestMCPNotAttached: a stdin that is a file (not a pipe or a socket)
// is not handed over: `sluice mcp` serves the session itself, says so
// and why on stderr, and exits 0 at the file's end; with --local it
// serves the session itself over pipes, and answers.
func TestMCPNotAttached(t *testing.T) {
	fx := escapetest.Build(t)
	d := startOwnDaemon(t, fx.Manifest)
	f := writeFile(t, t.TempDir(), "empty", "")
	in, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cmd := exec.Command(filepath.Join(binDir, "sluice"), "mcp", "--socket", d.socket)
	cmd.Stdin = in
	var stdout bytes.Buffer
	stderr := &testutil.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sluice mcp < file: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr.String(), "serving the MCP session in this process") || !strings.Contains(stderr.String(), "not a pipe or a socket") {
		t.Fatalf("stderr does not say why the session was not attached:\n%s", stderr)
	}
	p := startMCP(t, exec.Command(filepath.Join(binDir, "sluice"), "mcp", "--local", "--socket", d.socket))
	p.initialize()
	if holdsPipeOf(t, d.cmd.Process.Pid, p.cmd.Process.Pid, 1) {
		t.Fatal("--local: sluiced holds the session's stdout")
	}
	if text, isErr := p.callText("read_file", map[string]any{"path": "workspace/src/a.py"}); isErr || text != "print('hello')\n" {
		t.Fatalf("--local read_file: %q %v", text, isErr)
	}
}

// TestMCPAttachRefusals: POST /v1/mcp over the socket, by hand. Without
// the Upgrade header it is a 400; the descriptors must come as two, in
// one message, each an anonymous pipe or a unix stream socket open the
// right way: anything else is refused with a reason, and sluiced keeps
// none of them.
func TestMCPAttachRefusals(t *testing.T) {
	fx := escapetest.Build(t)
	d := startOwnDaemon(t, fx.Manifest)
	dial := func() (*net.UnixConn, *bufio.Reader) {
		c, err := net.Dial("unix", d.socket)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		return c.(*net.UnixConn), bufio.NewReader(c)
	}
	post := func(c *net.UnixConn, br *bufio.Reader, upgrade bool) string {
		h := "POST /v1/mcp HTTP/1.1\r\nHost: s\r\nContent-Length: 2\r\n"
		if upgrade {
			h += "Connection: Upgrade\r\nUpgrade: " + api.MCPUpgrade + "\r\n"
		}
		if _, err := c.Write([]byte(h + "\r\n{}")); err != nil {
			t.Fatal(err)
		}
		status, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		for {
			l, err := br.ReadString('\n')
			if err != nil || l == "\r\n" {
				break
			}
		}
		return status
	}
	// A connection takes no descriptors but an attach's (SO_PASSRIGHTS,
	// Linux 6.16): dropped by a read, they would be closed in sluiced's
	// reading thread, which a socket's linger or a FUSE flush can hold.
	if sp, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0); err == nil {
		supported := syscall.SetsockoptInt(sp[0], syscall.SOL_SOCKET, 83, 0) == nil
		syscall.Close(sp[0])
		syscall.Close(sp[1])
		if supported {
			c, _ := dial()
			if _, _, err := c.WriteMsgUnix([]byte("G"), syscall.UnixRights(int(os.Stdin.Fd())), nil); !errors.Is(err, syscall.EPERM) {
				t.Fatalf("descriptors sent on a plain connection: %v, want EPERM", err)
			}
		} else {
			t.Log("THIS KERNEL HAS NO SO_PASSRIGHTS (Linux 6.16): a plain connection still takes descriptors; not checked")
		}
	}
	c, br := dial()
	if s := post(c, br, false); !strings.Contains(s, " 400 ") {
		t.Fatalf("without Upgrade: %q", s)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	file, err := os.Open(filepath.Join(fx.Base, "workspace/src/a.py"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tf, err := tc.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	fifo := filepath.Join(t.TempDir(), "fifo")
	testutil.Must(t, syscall.Mkfifo(fifo, 0o600))
	ff, err := os.OpenFile(fifo, os.O_RDWR, 0) // O_RDWR: opens without a writer
	if err != nil {
		t.Fatal(err)
	}
	defer ff.Close()
	dg, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(dg[0])
	defer syscall.Close(dg[1])
	for _, tc := range []struct {
		name string
		fds  []int
		want string
	}{
		{"one descriptor", []int{int(pr.Fd())}, "want 2 descriptors"},
		{"three descriptors", []int{int(pr.Fd()), int(pw.Fd()), int(pw.Fd())}, "want 2 descriptors"},
		{"a regular file", []int{int(file.Fd()), int(pw.Fd())}, "stdin is not a pipe or a socket"},
		{"stdin write-only", []int{int(pw.Fd()), int(pw.Fd())}, "stdin is not open for reading"},
		{"a named FIFO", []int{int(ff.Fd()), int(pw.Fd())}, "stdin is not a pipe or a socket"},
		{"a TCP socket", []int{int(pr.Fd()), int(tf.Fd())}, "stdout is a socket, but not a unix socket"},
		{"a datagram socket", []int{dg[0], int(pw.Fd())}, "stdin is a unix socket, but not a stream socket"},
		{"stdout read-only", []int{int(pr.Fd()), int(pr.Fd())}, "stdout is not open for writing"},
	} {
		c, br := dial()
		if s := post(c, br, true); !strings.Contains(s, " 101 ") {
			t.Fatalf("%s: %q", tc.name, s)
		}
		if _, _, err := c.WriteMsgUnix([]byte{0}, syscall.UnixRights(tc.fds...), nil); err != nil {
			t.Fatal(err)
		}
		line, err := br.ReadBytes('\n')
		var st api.MCPAttachState
		if err != nil || json.Unmarshal(line, &st) != nil || st.Attached || !strings.Contains(st.Error, tc.want) {
			t.Fatalf("%s: %q %v, want an error saying %q", tc.name, line, err, tc.want)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("%s: the connection stays open after the refusal: %v", tc.name, err)
		}
	}
	// Descriptors queued on a socket stdin before it was handed over
	// are taken by sluiced's read, closed apart, and end the session.
	sp, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(sp[0])
	defer syscall.Close(sp[1])
	if err := syscall.Sendmsg(sp[0], []byte("x"), syscall.UnixRights(int(pr.Fd())), nil, 0); err != nil {
		t.Fatal(err)
	}
	{
		c, br := dial()
		if s := post(c, br, true); !strings.Contains(s, " 101 ") {
			t.Fatalf("rights on stdin: %q", s)
		}
		if _, _, err := c.WriteMsgUnix([]byte{0}, syscall.UnixRights(sp[1], int(pw.Fd())), nil); err != nil {
			t.Fatal(err)
		}
		var st api.MCPAttachState
		for _, want := range []string{"attached", "end"} {
			line, err := br.ReadBytes('\n')
			if err != nil || json.Unmarshal(line, &st) != nil {
				t.Fatalf("rights on stdin, %s: %q %v", want, line, err)
			}
		}
		if st.End != api.MCPEndError || !strings.Contains(st.Error, "descriptors sent on the session's stdin") {
			t.Fatalf("rights on stdin: the session ended %+v", st)
		}
	}
	// A second message with descriptors after the one an attach takes:
	// refused, if it got in before the connection stopped taking them.
	{
		c, br := dial()
		if s := post(c, br, true); !strings.Contains(s, " 101 ") {
			t.Fatalf("two messages: %q", s)
		}
		if _, _, err := c.WriteMsgUnix([]byte{0}, syscall.UnixRights(int(pr.Fd()), int(pw.Fd())), nil); err != nil {
			t.Fatal(err)
		}
		_, _, second := c.WriteMsgUnix([]byte{0}, syscall.UnixRights(int(pw.Fd())), nil)
		line, err := br.ReadBytes('\n')
		var st api.MCPAttachState
		if err != nil || json.Unmarshal(line, &st) != nil {
			t.Fatalf("two messages: %q %v", line, err)
		}
		switch {
		case second == nil && (st.Attached || !strings.Contains(st.Error, "more than one message")):
			t.Fatalf("a second message with descriptors got in, and the attach says %+v", st)
		case errors.Is(second, syscall.EPERM) && !st.Attached:
			t.Fatalf("the second message was refused by the kernel, and the attach says %+v", st)
		case second != nil && !errors.Is(second, syscall.EPERM):
			t.Fatalf("the second message: %v", second)
		}
		c.Close()
	}
	// None of them is still held: the pipe's only writer is ours.
	pw.Close()
	_ = pr.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := pr.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("sluiced kept the pipe's write end: %d %v", n, err)
	}
}
