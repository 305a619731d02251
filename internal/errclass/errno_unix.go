//go:build unix

package errclass

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
)

// errnos is the one table of errnos and their reasons. An errno not here
// (EIO, EPERM, ...) is internal_error: the daemon has to look at it.
var errnos = []struct {
	errno  unix.Errno
	reason api.Reason
}{
	{unix.ENOSPC, api.ReasonNoSpace},
	{unix.EDQUOT, api.ReasonNoSpace},
	{unix.ENAMETOOLONG, api.ReasonInvalidPath},
	{unix.EMFILE, api.ReasonBusy}, // this process's fds: a retry may succeed
	{unix.ENFILE, api.ReasonBusy}, // the system's
}

// NoSpace reports whether err says a file system is full or over quota.
func NoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}

// Errno is the errno a view or a syscall answer should carry for err:
// the wrapped one when there is one, else EIO.
func Errno(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO
}
