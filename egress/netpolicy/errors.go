package netpolicy

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/api"
)

// Sentinels, checked with errors.Is. Every refusal matches ErrEgressDenied
// and carries reason egress_denied; a malformed request (a method other
// than GET/HEAD, a body that is not JSON) matches ErrInvalidRequest and
// carries invalid_args. The daemon finds the reason with errclass, by the
// Reason method: this package spells no reason itself.
var (
	ErrEgressDenied   error = &reasonError{api.ReasonEgressDenied, "egress denied"}
	ErrInvalidRequest error = &reasonError{api.ReasonInvalidArgs, "invalid egress request"}
)

// reasonError is a sentinel with its reason. (internal/errclass has the
// general type; this package stays a leaf on api and the standard library
// so that authz, which decides with it, stays pure.)
type reasonError struct {
	reason api.Reason
	text   string
}

func (e *reasonError) Error() string      { return e.text }
func (e *reasonError) Reason() api.Reason { return e.reason }

// DeniedError is a refusal: by parsing (a URL trick), by policy (host,
// scheme, port, header, webhook) or by address (loopback, private, ...).
// Detail is a short phrase for the audit and logs; callers see the stable
// code egress_denied, not this prose.
type DeniedError struct {
	Detail string
	// Key is the policy key whose check refused a fetch's or post's
	// request (AuthorizeFetch, AuthorizePost): "hosts", "webhooks" or
	// "allowed_headers"; "" for a refusal by parsing or by address.
	Key string
}

func (e *DeniedError) Error() string        { return "egress denied: " + e.Detail }
func (e *DeniedError) Is(target error) bool { return target == ErrEgressDenied }
func (e *DeniedError) Reason() api.Reason   { return api.ReasonEgressDenied }

// Denied returns a *DeniedError with a formatted detail.
func Denied(format string, args ...any) error {
	return &DeniedError{Detail: fmt.Sprintf(format, args...)}
}

func denied(format string, args ...any) error { return Denied(format, args...) }

// keyed is err, when it is a refusal, naming key as the one that refused.
func keyed(err error, key string) error {
	var de *DeniedError
	if errors.As(err, &de) {
		return &DeniedError{Detail: de.Detail, Key: key}
	}
	return err
}

// detailOf is the phrase of a *DeniedError, or the error's text.
func detailOf(err error) string {
	var de *DeniedError
	if errors.As(err, &de) {
		return de.Detail
	}
	return err.Error()
}
