// Package errclass turns an error into the stable reason a caller sees, in
// one place (containerd's errdefs style; docs/reasons.md lists the
// reasons): file tools, views, containers, egress and the ledger all reach
// the same reason for the same failure.
//
// An error says its reason in one of two ways. A typed error carries it:
// anything in the chain with a Reason() api.Reason method (Reasoned), such
// as an *Error made by New or Wrap, fileop's sentinels, egress's
// *UpstreamError or netpolicy's *DeniedError. Otherwise its errno, wrapped
// with %w on its way up, is classified here, once (ENOSPC and EDQUOT are
// no_space, EMFILE busy, ...). Reason strings are spelled only in api.
package errclass

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/api"
)

// Reasoned is an error that knows the reason it becomes. errors.As finds
// the outermost one in a chain, so a layer that knows better (a commit
// that found its file gone) overrides the reason of what it wraps.
type Reasoned interface {
	error
	Reason() api.Reason
}

// Error is an error with its reason: a package's sentinel (New) or a
// failure given a reason where it is understood (Wrap).
type Error struct {
	Code api.Reason
	Err  error
}

func (e *Error) Error() string      { return e.Err.Error() }
func (e *Error) Unwrap() error      { return e.Err }
func (e *Error) Reason() api.Reason { return e.Code }

// New returns a sentinel error, checked with errors.Is, that carries
// reason r.
func New(r api.Reason, text string) error { return &Error{Code: r, Err: errors.New(text)} }

// Wrap gives err reason r; it still matches everything err matches.
func Wrap(r api.Reason, err error) error { return &Error{Code: r, Err: err} }

// Reason is the reason err becomes: the outermost reason a Reasoned error
// in its chain carries, else cancelled for a cancelled context and
// timeout for an expired one, else its errno's (the table above). nil is
// allowed. ok is false when nothing classifies err: the reason is then
// internal_error, and the daemon, not the caller, has to look at err (log
// it).
func Reason(err error) (r api.Reason, ok bool) {
	if err == nil {
		return api.ReasonAllowed, true
	}
	var re Reasoned
	if errors.As(err, &re) {
		return re.Reason(), true
	}
	switch {
	case errors.Is(err, context.Canceled):
		return api.ReasonCancelled, true
	case errors.Is(err, context.DeadlineExceeded):
		return api.ReasonTimeout, true
	}
	for _, x := range errnos {
		if errors.Is(err, x.errno) {
			return x.reason, true
		}
	}
	return api.ReasonInternalError, false
}
