package fileop

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
)

// Reserve is the free space a write must leave on the file system it
// writes to (sluiced --min-free). It stops the full-disk class: the
// default install keeps the workspaces and the state dir (the ledger) on
// one file system, and an agent that fills it would deny every other
// principal audit_unavailable. A write that would leave less is refused
// before it starts, with nothing written.
//
// The zero value is the default: 5% of the file system or 1 GiB,
// whichever is smaller. Off (--min-free 0) disables the reserve; ENOSPC
// and EDQUOT are still reported as such.
type Reserve struct {
	Bytes   uint64  // an absolute reserve, when set
	Percent float64 // a share of the file system's size, when set
	Off     bool    // no reserve
}

// DefaultReservePercent and DefaultReserveBytes make the zero Reserve:
// the smaller of the two.
const (
	DefaultReservePercent = 5
	DefaultReserveBytes   = 1 << 30
)

// ParseReserve reads --min-free: "0" (off), bytes with an optional binary
// suffix K, M, G or T ("512M", "2G", "1GiB"), or a percentage of the
// file system ("5%").
func ParseReserve(s string) (Reserve, error) {
	s = strings.TrimSpace(s)
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(pct, 64)
		if err != nil || f < 0 || f >= 100 || math.IsNaN(f) {
			return Reserve{}, fmt.Errorf("min-free %q: want a percentage from 0%% to below 100%%", s)
		}
		if f == 0 {
			return Reserve{Off: true}, nil
		}
		return Reserve{Percent: f}, nil
	}
	num, shift := s, 0
	up := strings.ToUpper(s)
	for _, u := range reserveUnits {
		if strings.HasSuffix(up, u.suffix) {
			num, shift = s[:len(s)-len(u.suffix)], u.shift
			break
		}
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil || v > math.MaxUint64>>shift {
		return Reserve{}, fmt.Errorf("min-free %q: want bytes (512M, 2G), a percentage (5%%) or 0", s)
	}
	if v == 0 {
		return Reserve{Off: true}, nil
	}
	return Reserve{Bytes: v << shift}, nil
}

// reserveUnits are --min-free's binary suffixes, longest first.
var reserveUnits = []struct {
	suffix string
	shift  int
}{
	{"KIB", 10}, {"MIB", 20}, {"GIB", 30}, {"TIB", 40},
	{"KB", 10}, {"MB", 20}, {"GB", 30}, {"TB", 40},
	{"K", 10}, {"M", 20}, {"G", 30}, {"T", 40}, {"B", 0},
}

// String is the reserve as --min-free writes it.
func (r Reserve) String() string {
	switch {
	case r.Off:
		return "0"
	case r.Percent > 0:
		return strconv.FormatFloat(r.Percent, 'f', -1, 64) + "%"
	case r.Bytes > 0:
		return strconv.FormatUint(r.Bytes, 10)
	}
	return fmt.Sprintf("min(%d%%,1G)", DefaultReservePercent)
}

// Set makes *Reserve a flag.Value.
func (r *Reserve) Set(s string) error {
	v, err := ParseReserve(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// need is the reserve in bytes on a file system of total bytes.
func (r Reserve) need(total uint64) uint64 {
	switch {
	case r.Off:
		return 0
	case r.Percent > 0:
		return uint64(float64(total) * r.Percent / 100)
	case r.Bytes > 0:
		return r.Bytes
	}
	return min(total/100*DefaultReservePercent, DefaultReserveBytes)
}

// NoSpaceError says a write was refused before it started because it
// would leave its file system below the reserve. It wraps ENOSPC, so
// errclass reports it as no_space.
type NoSpaceError struct {
	Name             string
	Size, Free, Need uint64
}

func (e *NoSpaceError) Error() string {
	return fmt.Sprintf("writing %d bytes to %q would leave %d bytes free, below the reserve of %d", e.Size, e.Name, e.Free-min(e.Free, e.Size), e.Need)
}

func (e *NoSpaceError) Unwrap() error      { return unix.ENOSPC }
func (e *NoSpaceError) Reason() api.Reason { return api.ReasonNoSpace }

// checkSpace refuses a write of size bytes into p that would leave its
// file system below r. It asks fstatfs on the parent's fd, the directory
// the write acts on, never a path: f_bavail (what an unprivileged writer
// may still use) times f_frsize.
func checkSpace(p *Parent, size int64, r Reserve) error {
	if r.Off {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(p.fd(), &st); err != nil {
		return fmt.Errorf("fstatfs: %w", err)
	}
	unit := uint64(st.Frsize)
	if unit == 0 {
		unit = uint64(st.Bsize)
	}
	total, free := st.Blocks*unit, st.Bavail*unit
	need := r.need(total)
	if need == 0 && size == 0 {
		return nil
	}
	if free < uint64(size) || free-uint64(size) < need {
		return &NoSpaceError{Name: p.Name, Size: uint64(size), Free: free, Need: need}
	}
	return nil
}
