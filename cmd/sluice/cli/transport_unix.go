//go:build unix

package cli

import "syscall"

// statFile reads a file's owner and mode for a permission hint.
func statFile(path string) (fileStat, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileStat{}, err
	}
	// Stat_t.Mode is uint16 on darwin, uint32 on Linux.
	return fileStat{Uid: st.Uid, Gid: st.Gid, Mode: uint32(st.Mode)}, nil
}
