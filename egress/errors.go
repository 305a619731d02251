package egress

import (
	"context"
	"errors"
	"net"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/egress/netpolicy"
)

// ErrUpstream matches every failure of an allowed request on the way to
// or from the upstream. Refusals match netpolicy.ErrEgressDenied and
// malformed requests netpolicy.ErrInvalidRequest. Each carries its reason
// (errclass.Reason finds it): egress_denied, invalid_args, upstream_error.
var ErrUpstream = errors.New("upstream error")

// UpstreamError is a failure of an allowed request: the name did not
// resolve, the connection was refused or reset, TLS failed (a certificate
// not valid for the host name), or the timeout expired. The verdict stays
// allow; the call ends with ok:false and reason upstream_error.
type UpstreamError struct {
	Op  string // "resolve", "dial", "tls", "request", "read", "timeout"
	Err error
}

func (e *UpstreamError) Error() string        { return "upstream " + e.Op + ": " + e.Err.Error() }
func (e *UpstreamError) Unwrap() error        { return e.Err }
func (e *UpstreamError) Is(target error) bool { return target == ErrUpstream }

// Reason is upstream_error, or cancelled when the caller's context was
// cancelled (the daemon then says why: cancelled, task_cancelled,
// shutdown). The request's own timeout is upstream_error.
func (e *UpstreamError) Reason() api.Reason {
	if errors.Is(e.Err, context.Canceled) {
		return api.ReasonCancelled
	}
	return api.ReasonUpstreamError
}

// Timeout reports whether the failure was the request's timeout.
func (e *UpstreamError) Timeout() bool {
	if e.Op == "timeout" || errors.Is(e.Err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(e.Err, &ne) && ne.Timeout()
}

func denied(format string, args ...any) error { return netpolicy.Denied(format, args...) }

// detailOf is the phrase of a *netpolicy.DeniedError, or the error's text.
func detailOf(err error) string {
	var de *netpolicy.DeniedError
	if errors.As(err, &de) {
		return de.Detail
	}
	return err.Error()
}
