//go:build !unix

package errclass

import (
	"syscall"

	"github.com/sluicehq/sluice/api"
)

// errnos is empty where there are no unix errnos: typed reasons and a
// context's end are still classified.
var errnos []struct {
	errno  syscall.Errno
	reason api.Reason
}
