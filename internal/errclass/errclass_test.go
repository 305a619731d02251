//go:build unix

package errclass

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
)

// reasoned is a typed error outside this package that carries its reason
// by method alone, as netpolicy's and egress's do.
type reasoned struct{}

func (reasoned) Error() string      { return "typed" }
func (reasoned) Reason() api.Reason { return api.ReasonEgressDenied }

// TestReason is the one table of what errors become: typed reasons first
// (the outermost wins), then a context's end, then the errno table.
func TestReason(t *testing.T) {
	wrapped := func(e error) error {
		return fmt.Errorf("write beneath /w: %w", &os.PathError{Op: "write", Path: "x", Err: e})
	}
	sentinel := New(api.ReasonPreconditionFailed, "precondition failed")
	cases := []struct {
		name string
		err  error
		want api.Reason
		ok   bool
	}{
		{"nil", nil, api.ReasonAllowed, true},
		{"ENOSPC", wrapped(unix.ENOSPC), api.ReasonNoSpace, true},
		{"EDQUOT", wrapped(unix.EDQUOT), api.ReasonNoSpace, true},
		{"ENAMETOOLONG", wrapped(unix.ENAMETOOLONG), api.ReasonInvalidPath, true},
		{"EMFILE", wrapped(unix.EMFILE), api.ReasonBusy, true},
		{"ENFILE", wrapped(unix.ENFILE), api.ReasonBusy, true},
		{"EIO is looked at", wrapped(unix.EIO), api.ReasonInternalError, false},
		{"EPERM is looked at", wrapped(unix.EPERM), api.ReasonInternalError, false},
		{"no errno", errors.New("no errno"), api.ReasonInternalError, false},
		{"second errno of a join", errors.Join(errors.New("x"), wrapped(unix.ENOSPC)), api.ReasonNoSpace, true},
		{"cancelled", fmt.Errorf("hash: %w", context.Canceled), api.ReasonCancelled, true},
		{"deadline", fmt.Errorf("hash: %w", context.DeadlineExceeded), api.ReasonTimeout, true},
		{"sentinel", sentinel, api.ReasonPreconditionFailed, true},
		{"wrapped sentinel", fmt.Errorf("write %q: %w", "x", sentinel), api.ReasonPreconditionFailed, true},
		{"typed by method", fmt.Errorf("fetch: %w", reasoned{}), api.ReasonEgressDenied, true},
		{"joined typed", errors.Join(errors.New("x"), reasoned{}), api.ReasonEgressDenied, true},
		// A reason beats the errno beneath it, and the outermost reason
		// beats the one it wraps: the layer that wrapped knows better.
		{"typed over errno", Wrap(api.ReasonNotDurable, wrapped(unix.EIO)), api.ReasonNotDurable, true},
		{"typed over ENOSPC", Wrap(api.ReasonLimitExceeded, wrapped(unix.ENOSPC)), api.ReasonLimitExceeded, true},
		{"outermost wins", Wrap(api.ReasonPreconditionFailed, fmt.Errorf("x: %w", reasoned{})), api.ReasonPreconditionFailed, true},
		{"typed over cancel", Wrap(api.ReasonUpstreamError, context.DeadlineExceeded), api.ReasonUpstreamError, true},
		{"first of two", fmt.Errorf("%w: %w", sentinel, reasoned{}), api.ReasonPreconditionFailed, true},
	}
	for _, c := range cases {
		got, ok := Reason(c.err)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: Reason(%v) = %s, %v; want %s, %v", c.name, c.err, got, ok, c.want, c.ok)
		}
	}
	if !errors.Is(fmt.Errorf("x: %w", sentinel), sentinel) || !errors.Is(Wrap(api.ReasonBusy, unix.EMFILE), unix.EMFILE) {
		t.Error("a reasoned error does not match what it is or wraps")
	}
	if sentinel.Error() != "precondition failed" {
		t.Errorf("sentinel text %q", sentinel.Error())
	}
}

func TestErrno(t *testing.T) {
	if Errno(fmt.Errorf("x: %w", unix.ENOSPC)) != unix.ENOSPC || Errno(errors.New("x")) != unix.EIO {
		t.Error("Errno does not unwrap")
	}
	if !NoSpace(fmt.Errorf("x: %w", unix.EDQUOT)) || NoSpace(unix.EIO) {
		t.Error("NoSpace")
	}
}
