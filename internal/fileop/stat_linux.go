package fileop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/securefs"
)

// Info is what a stat tool reports of one resolved name.
type Info struct {
	Kind    api.Kind
	Size    int64
	Perm    uint32 // st_mode's permission bits (07777)
	ModTime time.Time
	// SHA256 is "sha256:<hex>" of a regular file's content, empty for
	// anything else and for a file above MaxHashBytes (Size says why).
	// When set, Size is the length of exactly the bytes hashed.
	SHA256 string
}

// Stat describes what h names (fstat of its fd: the object the kernel
// resolved, never looked up again) and hashes a regular file of at most
// MaxHashBytes, re-opened for reading from the fd (securefs.Handle.Open),
// reading with pread from offset 0 under ctx (ctx's error when it ends).
// A FIFO, socket or device is described and never opened for I/O. A file
// that grew past the cap while being hashed is reported without a digest.
func Stat(ctx context.Context, h *securefs.Handle) (Info, error) {
	return StatTee(ctx, h, nil)
}

// StatTee is Stat that also hands every byte it hashes to tee, in the same
// pass (a redact scan sees exactly the bytes the digest is of). tee gets
// nothing when nothing is hashed, and only part of a file that turns out
// larger than the hash cap (whose Info then has no digest).
func StatTee(ctx context.Context, h *securefs.Handle, tee io.Writer) (Info, error) {
	f := h.File()
	if f == nil { // a socket the fallback resolver could only stat
		return Info{Kind: h.Kind, Size: h.Stat.Size, Perm: h.Stat.Mode & 0o7777, ModTime: mtime(&h.Stat)}, nil
	}
	var st unix.Stat_t
	err := unix.Fstat(int(f.Fd()), &st)
	runtime.KeepAlive(f)
	if err != nil {
		return Info{}, fmt.Errorf("stat: %w", err)
	}
	info := Info{Kind: kindOf(st.Mode), Size: st.Size, Perm: st.Mode & 0o7777, ModTime: mtime(&st)}
	if info.Kind != securefs.KindFile || st.Size > MaxHashBytes {
		return info, nil
	}
	rf, err := h.Open()
	if err != nil {
		return Info{}, fmt.Errorf("stat: %w", err)
	}
	defer rf.Close()
	// pread, not read: the fallback resolver's Open is a dup sharing the
	// handle's file offset.
	var r io.Reader = io.NewSectionReader(rf, 0, MaxHashBytes+1)
	if tee != nil {
		r = io.TeeReader(r, tee)
	}
	n, sum, err := hashBounded(ctx, r, MaxHashBytes)
	switch {
	case errors.Is(err, ErrTooLarge):
		return info, nil
	case err != nil:
		return Info{}, fmt.Errorf("stat: sha256: %w", err)
	}
	info.SHA256, info.Size = sum, n
	return info, nil
}

func mtime(st *unix.Stat_t) time.Time {
	return time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC()
}
