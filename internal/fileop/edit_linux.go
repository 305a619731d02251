package fileop

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
)

// ReadAll reads p's final name, which must be a regular file (never
// followed: a symlink, FIFO or device there is a *KindError and is never
// opened for I/O), at most limit bytes (more is ErrTooLarge), and returns
// the content with "sha256:<hex>" of exactly those bytes: what an edit
// applies its replacements to, and the if_match its commit through Write
// carries, so that a change by anyone between this read and the commit
// fails the commit's precondition instead of being overwritten. It stops
// with ctx's error between chunks.
func (p *Parent) ReadAll(ctx context.Context, limit int64) ([]byte, string, error) {
	defer runtime.KeepAlive(p)
	fd, err := unix.Openat(p.fd(), p.Name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil, "", fmt.Errorf("read %q: %w", p.Name, securefs.ErrNotExist)
	}
	if err != nil {
		return nil, "", fmt.Errorf("read %q: %w", p.Name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, "", fmt.Errorf("read %q: %w", p.Name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, "", fmt.Errorf("read: %w", &KindError{Name: p.Name, Kind: kindOf(st.Mode)})
	}
	if st.Size > limit {
		unix.Close(fd)
		return nil, "", fmt.Errorf("read %q: %w: %d bytes, above the cap of %d", p.Name, ErrTooLarge, st.Size, limit)
	}
	rfd, err := unix.Open(procFd(fd), unix.O_RDONLY|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	unix.Close(fd)
	if err != nil {
		return nil, "", fmt.Errorf("read %q: %w", p.Name, err)
	}
	f := os.NewFile(uintptr(rfd), p.Name)
	defer f.Close()
	var b bytes.Buffer
	b.Grow(int(st.Size))
	r := io.LimitReader(f, limit+1) // one byte more tells a file that grew past the cap
	for {
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		n, err := b.ReadFrom(io.LimitReader(r, hashChunk))
		if err != nil {
			return nil, "", fmt.Errorf("read %q: %w", p.Name, err)
		}
		if n == 0 {
			break
		}
	}
	if int64(b.Len()) > limit {
		return nil, "", fmt.Errorf("read %q: %w: more than %d bytes", p.Name, ErrTooLarge, limit)
	}
	buf := b.Bytes()
	sum := sha256.Sum256(buf)
	return buf, sha256Prefix + hex.EncodeToString(sum[:]), nil
}
