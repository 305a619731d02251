//go:build linux

package sandbox

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testutil"
)

// netScript prints, from inside a container: the interfaces and whether
// each is up, the routes, a connect to the proxy port, a connect to a
// port that listens on the HOST's loopback, and a connect off-host.
const netScript = `
import socket, sys
host_port = int(sys.argv[1])
for i, name in socket.if_nameindex():

    print('IF', name)
routes = open('/proc/net/route').read().splitlines()[1:]
print('ROUTES', len(routes))
def try_connect(tag, addr):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(addr)
        print(tag, 'connected', s.recv(16).decode().strip())
    except OSError as e:
        print(tag, 'failed', e.errno)
    finally:
        s.close()
try_connect('PROXY', ('127.0.0.1', ` + "3128" + `))
try_connect('HOST', ('127.0.0.1', host_port))
try_connect('OFFHOST', ('192.0.2.1', 80))
try:
    socket.getaddrinfo('example.com', 443)
    print('DNS resolved')
except OSError as e:
    print('DNS failed')
`

// TestEgressListener: with Spec.Egress the container's lo is up (and it
// is its only interface, with no route off it), sluiced's listener on
// 127.0.0.1:EgressPort answers from inside, and nothing else is reachable:
// not the host's loopback, not another address, not a DNS server. Without
// it nothing is up at all.
func TestEgressListener(t *testing.T) {
	r := newRunner(t)
	port, accepted := testutil.Listener(t) // on the HOST's 127.0.0.1
	argv := []string{"python3", "-c", netScript, port}

	s := defaultSpec(t)
	s.Egress = true
	b, err := r.Create(s)
	testutil.Must(t, err)
	l := b.EgressListener()
	if l == nil {
		t.Fatal("no egress listener")
	}
	served := make(chan int, 1)
	go func() {
		n := 0
		for {
			c, err := l.Accept()
			if err != nil {
				served <- n
				return
			}
			n++
			io.WriteString(c, "sluiced\n")
			c.Close()
		}
	}()
	res, err := b.Exec(context.Background(), argv, 65536, nil)
	testutil.Must(t, err)
	l.Close()
	out := string(res.Stdout) + string(res.Stderr)
	t.Logf("with egress:\n%s", out)
	for _, want := range []string{"IF lo\n", "ROUTES 0\n", "PROXY connected sluiced\n", "HOST failed 111\n", "OFFHOST failed 101\n", "DNS failed\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("with egress: want %q in:\n%s", want, out)
		}
	}
	if strings.Count(out, "IF ") != 1 {
		t.Errorf("interfaces other than lo:\n%s", out)
	}
	if n := <-served; n != 1 {
		t.Errorf("the listener served %d connections, want 1", n)
	}

	b, err = r.Create(defaultSpec(t))
	testutil.Must(t, err)
	if b.EgressListener() != nil {
		t.Error("a box without egress has a listener")
	}
	res, err = b.Exec(context.Background(), argv, 65536, nil)
	testutil.Must(t, err)
	out = string(res.Stdout) + string(res.Stderr)
	t.Logf("without egress:\n%s", out)
	for _, want := range []string{"ROUTES 0\n", "PROXY failed 101\n", "HOST failed 101\n", "OFFHOST failed 101\n", "DNS failed\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("without egress: want %q in:\n%s", want, out)
		}
	}
	if n := accepted(); n != 0 {
		t.Errorf("the host's listener on port %s accepted %d connections from containers", port, n)
	}

}
