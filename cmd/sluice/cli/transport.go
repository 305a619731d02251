package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/sluicehq/sluice/client"
)

// The CLI's transport errors name the fix, in the words `sluice mcp`
// uses for the same failures (mcp/bridge.go, unreachable): a missing
// socket, one this user may not open (read from the socket's real owner,
// group and mode), a stale one nobody listens on, a connection closed
// unread.

// identity is who runs sluice: what a permission hint compares the
// socket's group with. A variable, for tests.
var identity = func() (name string, gids []int, member func(gid int) bool) {
	name = strconv.Itoa(os.Getuid())
	u, err := user.LookupId(name)
	var listed []string
	if err == nil {
		name = u.Username
		listed, _ = u.GroupIds()
	}
	gids, _ = os.Getgroups()
	gids = append(gids, os.Getgid())
	member = func(gid int) bool {
		for _, g := range listed {
			if g == strconv.Itoa(gid) {
				return true
			}
		}
		return false
	}
	return name, gids, member
}

// lookupGroup is the name of group gid ("" if none), and whether a group
// named name exists. Variables, for tests.
var (
	groupName = func(gid int) string {
		g, err := user.LookupGroupId(strconv.Itoa(gid))
		if err != nil {
			return ""
		}
		return g.Name
	}
	groupExists = func(name string) bool {
		_, err := user.LookupGroup(name)
		return err == nil
	}
)

const (
	hintRunning = "Is sluiced running? Check `systemctl status sluiced` (start it with `sudo systemctl start sluiced`)."
	hintSocket  = "Another socket: `sluice --socket PATH` or $SLUICE_SOCKET."
	sluiceGroup = "sluice"
)

// transportHint is the message for err, a failure to talk to sluiced at
// socket that is not an answer of the daemon's.
func transportHint(socket string, err error) string {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return fmt.Sprintf("sluice: cannot reach sluiced: there is no socket at %s. %s %s", socket, hintRunning, hintSocket)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("sluice: cannot reach sluiced: nothing listens on %s (connection refused): the socket is stale, "+
			"left by a sluiced that stopped. %s Starting sluiced replaces the socket. %s", socket, hintRunning, hintSocket)
	case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM):
		return permissionHint(socket)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		return fmt.Sprintf("sluice: sluiced at %s closed the connection before answering: %v. It does so when this user has too many "+
			"calls in flight (its per-uid connection cap) or while it stops; nothing ran. Retry once fewer calls are open.", socket, err)
	}
	return fmt.Sprintf("sluice: cannot reach sluiced at %s: %v. %s %s", socket, err, hintRunning, hintSocket)
}

// permissionHint says why this user may not open socket, from the owner,
// group and mode of the socket, or of the first directory on its way
// this user may not enter, and which group to join.
func permissionHint(socket string) string {
	name, gids, member := identity()
	what, path := "socket", socket
	st, err := stat(path)
	for dir := filepath.Dir(socket); err != nil; dir = filepath.Dir(dir) {
		// the socket cannot be seen: a directory above it is closed
		what, path = "directory", dir
		st, err = stat(dir)
		if dir == "/" {
			break
		}
	}
	if err != nil {
		return fmt.Sprintf("sluice: may not open sluiced's socket %s: permission denied. %s", socket, hintSocket)
	}
	group := groupName(int(st.Gid))
	groupText := group
	if group == "" {
		groupText = strconv.Itoa(int(st.Gid)) + " (no such group on this host)"
	}
	owner := strconv.Itoa(int(st.Uid))
	if u, err := user.LookupId(owner); err == nil {
		owner = u.Username
	}
	head := fmt.Sprintf("sluice: may not open sluiced's socket %s: permission denied. ", socket)
	if what == "directory" {
		head += fmt.Sprintf("Its directory %s ", path)
	} else {
		head += "It "
	}
	head += fmt.Sprintf("is owner %s, group %s, mode %04o; this user is %s. ", owner, groupText, st.Mode&0o7777, name)
	inGroup := false
	for _, g := range gids {
		if g == int(st.Gid) {
			inGroup = true
		}
	}
	perm := uint32(0o060) // a socket's group needs read and write
	if what == "directory" {
		perm = 0o010 // a directory's group, search
	}
	switch {
	case group == "" || (int(st.Gid) == 0 && !groupExists(sluiceGroup)):
		return head + fmt.Sprintf("The group %s does not exist on this host, so sluiced could not give it the socket: "+
			"create it (`sudo groupadd --system %s`), restart sluiced (`sudo systemctl restart sluiced`), "+
			"then add the user to it (`sudo usermod -aG %s $USER`, then log in again).", sluiceGroup, sluiceGroup, sluiceGroup)
	case inGroup && st.Mode&perm != perm:
		return head + fmt.Sprintf("Its mode gives group %s no access; sluiced makes it 0660 (its directory 0750): "+
			"restart sluiced (`sudo systemctl restart sluiced`) to make it again.", group)
	case inGroup:
		return head + hintSocket
	case member(int(st.Gid)):
		return head + fmt.Sprintf("The user is in group %s, but this session started before it was added: "+
			"log in again (or run `newgrp %s`).", group, group)
	}
	return head + fmt.Sprintf("Add the user to group %s (`sudo usermod -aG %s $USER`, then log in again).", group, group)
}

// fileStat is what a permission hint reads of a file.
type fileStat struct {
	Uid, Gid uint32
	Mode     uint32
}

// stat is a variable, for tests.
var stat = statFile

// transportErr prints err, a call's failure, naming the fix when the
// daemon could not be reached, and returns the exit code.
func (e *env) transportErr(err error) int {
	var ae *client.APIError
	if errors.As(err, &ae) {
		fmt.Fprintf(e.stderr, "sluice: %v\n", err)
		if ae.Status == 403 {
			return ExitDenied
		}
		return ExitUsage
	}
	fmt.Fprintln(e.stderr, transportHint(e.socket, err))
	return ExitUsage
}
