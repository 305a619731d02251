//go:build unix

// Package errclass turns an error into the stable reason a caller sees, in
// one place (containerd's errdefs style): file tools, views, containers
// and the ledger all reach the same reason for the same errno, as long as
// the errno is wrapped with %w on its way up.
package errclass

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
)

// Reason is the reason an execution error becomes. Errors it does not know
// are internal_error: the daemon, not the caller, has to look at those.
func Reason(err error) api.Reason {
	switch {
	case err == nil:
		return api.ReasonAllowed
	case NoSpace(err):
		return api.ReasonNoSpace
	case errors.Is(err, unix.ENAMETOOLONG):
		return api.ReasonInvalidPath
	case errors.Is(err, unix.EMFILE), errors.Is(err, unix.ENFILE):
		return api.ReasonBusy
	}
	return api.ReasonInternalError
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
