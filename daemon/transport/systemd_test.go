//go:build linux

package transport

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestListenerFrom: only one listening unix stream socket is taken from
// systemd; whatever else a unit might pass is refused by name.
func TestListenerFrom(t *testing.T) {
	dir := t.TempDir()
	fileOf := func(t *testing.T, c interface{ File() (*os.File, error) }) *os.File {
		f, err := c.File()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	unixListener := func(t *testing.T, name string) *os.File {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, name), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return fileOf(t, l)
	}
	cases := []struct {
		name  string
		files func(t *testing.T) []*os.File
		want  string // "" = accepted
	}{
		{"unix stream listener", func(t *testing.T) []*os.File { return []*os.File{unixListener(t, "ok.sock")} }, ""},
		{"two sockets", func(t *testing.T) []*os.File {
			return []*os.File{unixListener(t, "a.sock"), unixListener(t, "b.sock")}
		}, "exactly one ListenStream="},
		{"datagram socket", func(t *testing.T) []*os.File {
			c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "dg.sock"), Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return []*os.File{fileOf(t, c)}
		}, "not a unix stream socket"},
		{"TCP listener", func(t *testing.T) []*os.File {
			l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return []*os.File{fileOf(t, l)}
		}, "not a unix stream socket"},
		{"connected stream socket (Accept=yes)", func(t *testing.T) []*os.File {
			fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
			if err != nil {
				t.Fatal(err)
			}
			syscall.Close(fds[1])
			return []*os.File{os.NewFile(uintptr(fds[0]), "pair")}
		}, "not listening"},
		{"not a socket", func(t *testing.T) []*os.File {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			w.Close()
			return []*os.File{r}
		}, "not a socket"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files := c.files(t)
			l, err := listenerFrom(files)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				l.Close()
			} else if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one saying %q", err, c.want)
			}
			for _, f := range files {
				if f.Fd() != ^uintptr(0) {
					t.Errorf("file %s left open", f.Name())
				}
			}
		})
	}
}
