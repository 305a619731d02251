//go:build unix

package errclass

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
)

func TestReason(t *testing.T) {
	wrapped := func(e error) error {
		return fmt.Errorf("write beneath /w: %w", &os.PathError{Op: "write", Path: "x", Err: e})
	}
	cases := []struct {
		err  error
		want api.Reason
	}{
		{nil, api.ReasonAllowed},
		{wrapped(unix.ENOSPC), api.ReasonNoSpace},
		{wrapped(unix.EDQUOT), api.ReasonNoSpace},
		{wrapped(unix.ENAMETOOLONG), api.ReasonInvalidPath},
		{wrapped(unix.EMFILE), api.ReasonBusy},
		{wrapped(unix.ENFILE), api.ReasonBusy},
		{wrapped(unix.EIO), api.ReasonInternalError},
		{errors.New("no errno"), api.ReasonInternalError},
	}
	for _, c := range cases {
		if got := Reason(c.err); got != c.want {
			t.Errorf("Reason(%v) = %s, want %s", c.err, got, c.want)
		}
	}
	if Errno(wrapped(unix.ENOSPC)) != unix.ENOSPC || Errno(errors.New("x")) != unix.EIO {
		t.Error("Errno does not unwrap")
	}
}
