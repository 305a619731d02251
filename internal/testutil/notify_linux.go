package testutil

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// NotifySocket listens where sd_notify sends (the datagram socket that
// NOTIFY_SOCKET names) until the test ends. It returns the socket's path,
// for NOTIFY_SOCKET in the daemon's environment, and a channel that hands
// on each datagram and is closed when the socket is.
func NotifySocket(t testing.TB) (path string, msgs <-chan string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				close(ch)
				return
			}
			ch <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { c.Close() })
	return path, ch
}

// AwaitNotify returns the next notification from msgs that has want,
// failing the test on one that has unwanted first (unless unwanted is
// empty), on the socket's close, or when none came within 30 s.
func AwaitNotify(t testing.TB, msgs <-chan string, want, unwanted string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("notify socket closed before %q", want)
			}
			if unwanted != "" && strings.Contains(m, unwanted) {
				t.Fatalf("got %q before %q", m, want)
			}
			if strings.Contains(m, want) {
				return m
			}
		case <-timeout:
			t.Fatalf("no %q within 30 s", want)
		}
	}
}
