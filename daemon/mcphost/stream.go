//go:build linux

package mcphost

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// stream is one of a session's two descriptors, as the session uses it.
// Neither kind depends on the flags of the open file the client shares:
// a pipe is opened anew (an open file of sluiced's own, non-blocking), a
// socket is read and written with MSG_DONTWAIT. So no client can make a
// read or a write block one of sluiced's threads, and ending a session
// (a deadline, a close) always ends what waits on it.
type stream interface {
	io.Reader
	io.Writer
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
	Close() error
}

// cred is the attaching peer's: what sluiced's writes on a socket say of
// their sender (SCM_CREDENTIALS), never sluiced itself.
type cred struct {
	PID      int32
	UID, GID uint32
}

// receive reads the one message that carries stdin and stdout, checks
// both, and only then makes them the session's streams: a refused pair
// is closed untouched.
func receive(uc *net.UnixConn, c cred, closeLater func(...io.Closer)) (in, out stream, err error) {
	_ = uc.SetReadDeadline(time.Now().Add(attachTimeout))
	defer uc.SetReadDeadline(time.Time{})
	buf := make([]byte, 1)
	// Room for the most descriptors one message can carry
	// (SCM_MAX_FD): the kernel closes what does not fit inside recvmsg,
	// in this thread, and a close can wait on what the client chose.
	oob := make([]byte, unix.CmsgSpace(253*4))
	_, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the descriptors: %w", err)
	}
	fds := fdsIn(oob[:oobn])
	// Each is opened anew or dup'd below. A close can wait on what the
	// client chose (a socket's linger: turned off first; a FUSE file's
	// flush), so it runs apart.
	defer func() { closeLater(closers(fds)...) }()
	if flags&unix.MSG_CTRUNC != 0 || len(fds) != 2 {
		return nil, nil, fmt.Errorf("want 2 descriptors (stdin, stdout) in one message, got %d", len(fds))
	}
	var kinds [2]string
	for i, fd := range fds {
		if kinds[i], err = check(fd, i == 0); err != nil {
			return nil, nil, err
		}
		if kinds[i] == "socket" && c.PID == 0 {
			// SCM_CREDENTIALS needs the peer's pid in sluiced's pid
			// namespace, and sluiced writes on a socket as nobody else.
			return nil, nil, fmt.Errorf("%s is a socket, and the peer's pid is not known in sluiced's pid namespace", map[bool]string{true: "stdin", false: "stdout"}[i == 0])
		}
	}
	if in, err = open(fds[0], kinds[0], true, c, closeLater); err != nil {
		return nil, nil, err
	}
	if out, err = open(fds[1], kinds[1], false, c, closeLater); err != nil {
		closeLater(in)
		return nil, nil, err
	}
	return in, out, nil
}

// check says whether fd may be the session's stdin (read) or stdout: an
// anonymous pipe, or a unix stream socket with peer credentials, open the
// right way. It returns "pipe" or "socket". Nothing here can wait on a
// filesystem: the link's name says what it is before anything else is
// asked (a named FIFO, on a FUSE mount say, is refused by its name).
func check(fd int, read bool) (string, error) {
	name := "stdout"
	if read {
		name = "stdin"
	}
	link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	kind, _, _ := strings.Cut(link, ":[")
	if kind != "pipe" && kind != "socket" || !strings.HasSuffix(link, "]") {
		return "", fmt.Errorf("%s is not a pipe or a socket", name)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	switch acc := fl & unix.O_ACCMODE; {
	case read && acc == unix.O_WRONLY, !read && acc == unix.O_RDONLY:
		return "", fmt.Errorf("%s is not open for %s", name, map[bool]string{true: "reading", false: "writing"}[read])
	}
	if kind == "pipe" {
		return kind, nil
	}
	if dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || dom != unix.AF_UNIX {
		return "", fmt.Errorf("%s is a socket, but not a unix socket", name)
	}
	// A stream with a peer: a datagram socket connect()ed to a receiver
	// has no peer credentials, and a listening socket carries no stream.
	if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_STREAM {
		return "", fmt.Errorf("%s is a unix socket, but not a stream socket", name)
	}
	if pc, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED); err != nil || pc.Pid == 0 {
		return "", fmt.Errorf("%s is a unix socket with no peer", name)
	}
	return kind, nil
}

// open makes fd (checked, of kind) a stream of sluiced's own.
func open(fd int, kind string, read bool, c cred, closeLater func(...io.Closer)) (stream, error) {
	name, flag := "stdout", unix.O_WRONLY
	if read {
		name, flag = "stdin", unix.O_RDONLY
	}
	if kind == "pipe" {
		// A new open file of the same pipe: its flags are sluiced's
		// alone. (A pipe's write end with no reader left: ENXIO.)
		nfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), flag|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("%s: opening the pipe: %w", name, err)
		}
		return os.NewFile(uintptr(nfd), "mcp-"+name), nil
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// No descriptors may come in on it: those dropped by a read would be
	// closed in sluiced's reading thread, and a close can wait on what
	// the client chose (SO_PASSRIGHTS, Linux 6.16; an older kernel
	// refuses the option, and a session's reads then run the risk).
	_ = unix.SetsockoptInt(nfd, unix.SOL_SOCKET, soPassRights, 0)
	_ = unix.SetsockoptLinger(nfd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{})
	// Non-blocking so that the runtime's poller takes it (the flag is
	// the shared open file's: `sluice mcp` puts it back when the session
	// ends; nothing here relies on it staying set).
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	f := os.NewFile(uintptr(nfd), "mcp-"+name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &sock{File: f, rc: rc, creds: unix.UnixCredentials(&unix.Ucred{Pid: c.PID, Uid: c.UID, Gid: c.GID}), closeLater: closeLater}, nil
}

// sock is a unix stream socket read and written with MSG_DONTWAIT (a
// client that clears O_NONBLOCK on the open file it shares blocks no
// thread of sluiced's), each write carrying the peer's credentials.
type sock struct {
	*os.File
	rc         syscall.RawConn
	creds      []byte
	closeLater func(...io.Closer)
	oob        []byte
}

// errRights ends a session whose stdin socket carried descriptors.
var errRights = errors.New("descriptors sent on the session's stdin")

func (s *sock) Read(p []byte) (int, error) {
	var n, oobn int
	var err error
	if s.oob == nil {
		s.oob = make([]byte, unix.CmsgSpace(253*4))
	}
	if rerr := s.rc.Read(func(fd uintptr) bool {
		// With room for descriptors: any queued before SO_PASSRIGHTS
		// was set are taken here and closed apart, not dropped by the
		// kernel in this thread.
		n, oobn, _, _, err = unix.Recvmsg(int(fd), p, s.oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
		return err != unix.EAGAIN
	}); rerr != nil {
		return 0, rerr
	}
	if err != nil {
		return 0, os.NewSyscallError("recvmsg", err)
	}
	if oobn > 0 {
		if fds := rightsIn(s.oob[:oobn]); len(fds) > 0 {
			s.closeLater(fds...)
			return 0, errRights
		}
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (s *sock) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		var n int
		var err error
		if werr := s.rc.Write(func(fd uintptr) bool {
			n, err = unix.SendmsgN(int(fd), p, s.creds, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
			return err != unix.EAGAIN
		}); werr != nil {
			return total, werr
		}
		if err != nil {
			return total, os.NewSyscallError("sendmsg", err)
		}
		total += n
		p = p[n:]
	}
	return total, nil
}

// soPassRights is SO_PASSRIGHTS (Linux 6.16; golang.org/x/sys does not
// name it yet): 0 refuses SCM_RIGHTS on a socket, at the sender.
const soPassRights = 83

// fdCloser closes a raw descriptor.
type fdCloser int

func (fd fdCloser) Close() error { return unix.Close(int(fd)) }

// fdsIn is every descriptor the SCM_RIGHTS messages in oob carry.
func fdsIn(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if r, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

// closers makes fds closable apart, a socket's linger turned off first.
func closers(fds []int) []io.Closer {
	cs := make([]io.Closer, len(fds))
	for i, fd := range fds {
		_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{})
		cs[i] = fdCloser(fd)
	}
	return cs
}

// rightsIn is every descriptor oob carries, to be closed apart.
func rightsIn(oob []byte) []io.Closer { return closers(fdsIn(oob)) }

// Drain takes, without waiting, whatever is queued on uc (a client may
// queue more than the one message an attach takes), closing every
// descriptor it carries apart; it reports whether anything was.
func Drain(uc *net.UnixConn, closeLater func(...io.Closer)) bool {
	raw, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	got := false
	buf := make([]byte, 512)
	oob := make([]byte, unix.CmsgSpace(253*4))
	_ = raw.Read(func(fd uintptr) bool {
		for {
			n, oobn, _, _, err := unix.Recvmsg(int(fd), buf, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
			if err != nil || n == 0 && oobn == 0 {
				return true
			}
			got = true
			if cs := rightsIn(oob[:oobn]); len(cs) > 0 {
				closeLater(cs...)
			}
		}
	})
	return got
}
