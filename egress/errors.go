package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// Sentinels, checked with errors.Is. Every error this package returns for a
// refusal matches ErrEgressDenied; every failure of an allowed request on
// the way to or from the upstream matches ErrUpstream; malformed requests
// (a method other than GET/HEAD, a body that is not JSON) match
// ErrInvalidRequest.
var (
	ErrEgressDenied   = errors.New("egress denied")
	ErrUpstream       = errors.New("upstream error")
	ErrInvalidRequest = errors.New("invalid egress request")
)

// Stable reason codes (docs/reasons.md) this package's errors map to; the
// daemon's api package carries the same strings.
const (
	ReasonAllowed       = "allowed"
	ReasonEgressDenied  = "egress_denied"
	ReasonUpstreamError = "upstream_error"
	ReasonInvalidArgs   = "invalid_args"
	ReasonLimitExceeded = "limit_exceeded"
	ReasonCancelled     = "cancelled"
	ReasonInternalError = "internal_error"
)

// DeniedError is a refusal: by parsing (a URL trick), by policy (host,
// scheme, port, header, webhook) or by address (loopback, private, ...).
// Reason is a short phrase for the audit and logs, never shown as prose in
// place of the stable code egress_denied.
type DeniedError struct {
	Reason string
}

func (e *DeniedError) Error() string        { return "egress denied: " + e.Reason }
func (e *DeniedError) Is(target error) bool { return target == ErrEgressDenied }

func denied(format string, args ...any) error {
	return &DeniedError{Reason: fmt.Sprintf(format, args...)}
}

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

// Timeout reports whether the failure was the request's timeout.
func (e *UpstreamError) Timeout() bool {
	if e.Op == "timeout" || errors.Is(e.Err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(e.Err, &ne) && ne.Timeout()
}

// Reason maps an error from this package to its stable reason code, in one
// place (STYLE.md habit 15). A cancelled parent context is "cancelled".
func Reason(err error) string {
	switch {
	case err == nil:
		return ReasonAllowed
	case errors.Is(err, ErrEgressDenied):
		return ReasonEgressDenied
	case errors.Is(err, ErrInvalidRequest):
		return ReasonInvalidArgs
	case errors.Is(err, context.Canceled):
		return ReasonCancelled
	case errors.Is(err, ErrUpstream):
		return ReasonUpstreamError
	}
	return ReasonInternalError
}
