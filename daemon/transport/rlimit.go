//go:build linux

package transport

import (
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/fsview"
)

// RaiseNofile raises sluiced's soft RLIMIT_NOFILE to its hard limit, so
// the fds execute views hold for containers' open files (each container
// capped at its tool's max_open_files, see fsview) come from the whole
// allowance, and logs the split: views together may hold the limit less
// fsview.Reserve, which stays for connections, the ledger and file-tool
// calls, so sluiced keeps serving while every container is at its cap.
// The Go runtime raises the limit when the binary starts; this does it
// again for a daemon run in a process that lowered it since (tests, an
// embedding program), and says what the views may use.
func RaiseNofile(log *slog.Logger) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("read RLIMIT_NOFILE", "err", err)
		return
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &raised); err != nil {
			log.Warn("raise soft RLIMIT_NOFILE to the hard limit", "soft", lim.Cur, "hard", lim.Max, "err", err)
		} else {
			lim = raised
		}
	}
	log.Debug("open file limit", "nofile", lim.Cur, "view_reserve", fsview.Reserve(lim.Cur))
}
