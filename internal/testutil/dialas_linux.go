package testutil

import (
	"context"
	"fmt"
	"net"
	"runtime"

	"golang.org/x/sys/unix"
)

// DialAs returns a dialer whose unix-socket connections carry uid's
// credentials, for a client that must reach the daemon as another
// principal: SO_PEERCRED reports the effective uid at connect, and the fs
// uid stays 0 so the socket's mode lets it in. The dial runs on a thread
// of its own that is never unlocked, so it dies with its odd uid.
func DialAs(socket string, uid int) func(context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		done := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
				done <- result{err: fmt.Errorf("setresuid: %w", e)}
				return
			}
			unix.RawSyscall(unix.SYS_SETFSUID, 0, 0, 0)
			c, err := net.Dial("unix", socket)
			done <- result{c, err}
		}()
		r := <-done
		return r.c, r.err
	}
}
