package netpolicy

import (
	"errors"
	"fmt"
)

// Sentinels, checked with errors.Is. Every refusal matches ErrEgressDenied
// (reason code egress_denied); a malformed request (a method other than
// GET/HEAD, a body that is not JSON) matches ErrInvalidRequest
// (invalid_args).
var (
	ErrEgressDenied   = errors.New("egress denied")
	ErrInvalidRequest = errors.New("invalid egress request")
)

// DeniedError is a refusal: by parsing (a URL trick), by policy (host,
// scheme, port, header, webhook) or by address (loopback, private, ...).
// Reason is a short phrase for the audit and logs; callers see the stable
// code egress_denied, not this prose.
type DeniedError struct {
	Reason string
}

func (e *DeniedError) Error() string        { return "egress denied: " + e.Reason }
func (e *DeniedError) Is(target error) bool { return target == ErrEgressDenied }

// Denied returns a *DeniedError with a formatted reason.
func Denied(format string, args ...any) error {
	return &DeniedError{Reason: fmt.Sprintf(format, args...)}
}

func denied(format string, args ...any) error { return Denied(format, args...) }

// reasonOf is the phrase of a *DeniedError, or the error's text.
func reasonOf(err error) string {
	var de *DeniedError
	if errors.As(err, &de) {
		return de.Reason
	}
	return err.Error()
}
