package audit

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ledgerIdentity names the ledger file: its inode and birth time.
func ledgerIdentity(f *os.File) (walIdentity, error) {
	var st unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_BTIME, &st); err != nil {
		return walIdentity{}, fmt.Errorf("statx audit ledger: %w", err)
	}
	id := walIdentity{Ino: st.Ino}
	if st.Mask&unix.STATX_BTIME != 0 {
		id.BirthSec, id.BirthNsec = st.Btime.Sec, st.Btime.Nsec
	}
	return id, nil
}

// openRegular opens path for reading without following a symlink or
// blocking on a FIFO, and only if it is a regular file (verify may run
// on copies in directories others can write).
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s: not a regular file", path)
		}
		return nil, err
	}
	return f, nil
}
