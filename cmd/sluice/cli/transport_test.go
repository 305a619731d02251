package cli

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestTransportErrorsNameTheFix: the CLI does not print `dial unix …: no
// such file or directory`; it says what is wrong and what to do, as
// `sluice mcp` does.
func TestTransportErrorsNameTheFix(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "none.sock")
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // the file stays; nobody listens
	for _, c := range []struct{ name, socket, want string }{
		{"missing", missing, "sluice: cannot reach sluiced: there is no socket at " + missing + ". Is sluiced running? " +
			"Check `systemctl status sluiced` (start it with `sudo systemctl start sluiced`). " +
			"Another socket: `sluice --socket PATH` or $SLUICE_SOCKET.\n"},
		{"stale", stale, "sluice: cannot reach sluiced: nothing listens on " + stale + " (connection refused): the socket is stale, " +
			"left by a sluiced that stopped. Is sluiced running? Check `systemctl status sluiced` (start it with `sudo systemctl start sluiced`). " +
			"Starting sluiced replaces the socket. Another socket: `sluice --socket PATH` or $SLUICE_SOCKET.\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, args := range [][]string{{"health"}, {"call", "read_file"}, {"tools"}} {
				var stdout, stderr bytes.Buffer
				code := run(context.Background(), append([]string{"--socket", c.socket}, args...), &stdout, &stderr)
				if code != ExitUsage || stderr.String() != c.want {
					t.Errorf("%v: exit %d\n got %q\nwant %q", args, code, stderr.String(), c.want)
				}
			}
		})
	}
}

// TestPermissionHint: a socket this user may not open is described from
// its real owner, group and mode (stat), with the group to join, or the
// group that does not exist.
func TestPermissionHint(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	if err := os.WriteFile(sock, nil, 0o660); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o660); err != nil {
		t.Fatal(err)
	}
	owner := "root"
	if os.Getuid() != 0 {
		t.Skip("needs root to chown the test's socket to another group")
	}
	was := identity
	defer func() { identity = was }()
	inSluice := false
	identity = func() (string, []int, func(int) bool) {
		return "alice", []int{1000}, func(gid int) bool { return inSluice && gid == 65534 }
	}
	wasExists := groupExists
	defer func() { groupExists = wasExists }()
	sluiceExists := true
	groupExists = func(string) bool { return sluiceExists }
	eacces := &url.Error{Op: "Get", URL: "http://sluiced/v1/health", Err: &net.OpError{Op: "dial", Net: "unix",
		Err: os.NewSyscallError("connect", syscall.EACCES)}}
	head := "sluice: may not open sluiced's socket " + sock + ": permission denied. It is owner " + owner + ", "
	for _, c := range []struct {
		name      string
		gid       int
		inSluice  bool
		sluiceGrp bool
		want      string
	}{
		{"join the group", 65534, false, true, head + "group nogroup, mode 0660; this user is alice. " +
			"Add the user to group nogroup (`sudo usermod -aG nogroup $USER`, then log in again)."},
		{"added, not logged in again", 65534, true, true, head + "group nogroup, mode 0660; this user is alice. " +
			"The user is in group nogroup, but this session started before it was added: log in again (or run `newgrp nogroup`)."},
		{"no such group", 54321, false, true, head + "group 54321 (no such group on this host), mode 0660; this user is alice. " +
			"The group sluice does not exist on this host, so sluiced could not give it the socket: create it (`sudo groupadd --system sluice`), " +
			"restart sluiced (`sudo systemctl restart sluiced`), then add the user to it (`sudo usermod -aG sluice $USER`, then log in again)."},
		{"left to root", 0, false, false, head + "group root, mode 0660; this user is alice. " +
			"The group sluice does not exist on this host, so sluiced could not give it the socket: create it (`sudo groupadd --system sluice`), " +
			"restart sluiced (`sudo systemctl restart sluiced`), then add the user to it (`sudo usermod -aG sluice $USER`, then log in again)."},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.Chown(sock, 0, c.gid); err != nil {
				t.Fatal(err)
			}
			inSluice, sluiceExists = c.inSluice, c.sluiceGrp
			if got := transportHint(sock, eacces); got != c.want {
				t.Errorf("\n got %s\nwant %s", got, c.want)
			}
		})
	}
}
