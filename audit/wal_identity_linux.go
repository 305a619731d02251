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
