//go:build linux

// Package spill keeps the request bodies of parked calls on disk, beneath
// the state dir, each checked by its digest when it is read back.
package spill

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Dir is where parked calls keep their request bodies, beneath the
// state dir. Nothing in it outlives the call that made it; whatever a
// crash left is removed at start (sweep).
const Dir = "parked"

// Store keeps the request bodies of calls waiting for a human on
// disk, not in the heap. Finding 6 of the review: a parked call kept its
// whole body (up to --max-body-bytes, 1 MiB by default, and its decoded
// args beside it) for the approval timeout, so a few hundred parked calls
// of one local user took the daemon from 17 MB to 476 MB, and the
// connection caps allowed about 2 GB. Spilled, a parked call holds a few
// KiB: its id, its recorded args (no file bodies) and the digest of what
// it spilled, which the approved call checks when it reads it back.
type Store struct {
	dir *os.File // STATE_DIR/parked, O_DIRECTORY; files are reached from it
}

// Open makes (0700) and opens STATE_DIR/parked, and removes every
// file in it: a body there belongs to a call of an earlier run, which no
// caller waits for any more.
func Open(stateDir string) (*Store, int, error) {
	p := filepath.Join(stateDir, Dir)
	if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, 0, fmt.Errorf("spill dir: %w", err)
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("spill dir %s: %w", p, err)
	}
	s := &Store{dir: os.NewFile(uintptr(fd), p)}
	if err := unix.Fchmod(fd, 0o700); err != nil {
		s.Close()
		return nil, 0, fmt.Errorf("spill dir %s: %w", p, err)
	}
	n, err := s.sweep()
	if err != nil {
		s.Close()
		return nil, n, err
	}
	return s, n, nil
}

// Close closes the spill dir.
func (s *Store) Close() { s.dir.Close() }

func (s *Store) fd() int { return int(s.dir.Fd()) }

// sweep removes every entry of the spill dir (a crash's leftovers).
func (s *Store) sweep() (int, error) {
	defer runtime.KeepAlive(s.dir)
	dfd, err := unix.Dup(s.fd())
	if err != nil {
		return 0, fmt.Errorf("sweep spill dir: %w", err)
	}
	d := os.NewFile(uintptr(dfd), s.dir.Name())
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, fmt.Errorf("sweep spill dir: %w", err)
	}
	n := 0
	for _, name := range names {
		if unix.Unlinkat(s.fd(), name, 0) == nil {
			n++
		}
	}
	return n, nil
}

// Body is one parked call's body on disk: its name in the spill dir,
// and the sha256 and length of what was written there.
type Body struct {
	name   string
	digest string
	size   int64
}

// Put writes body to a new file (0600, O_EXCL, never following a link)
// named for the approval id. A full disk is an error wrapping ENOSPC,
// which the caller turns into the reason no_space.
func (s *Store) Put(id string, body []byte) (*Body, error) {
	defer runtime.KeepAlive(s.dir)
	if id == "" || strings.ContainsAny(id, "/\x00") || strings.HasPrefix(id, ".") {
		return nil, fmt.Errorf("spill %q: bad name", id)
	}
	name := id + ".body"
	fd, err := unix.Openat(s.fd(), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spill %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	_, err = f.Write(body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(s.fd(), name, 0)
		return nil, fmt.Errorf("spill %s: %w", name, err)
	}
	sum := sha256.Sum256(body)
	return &Body{name: name, digest: "sha256:" + hex.EncodeToString(sum[:]), size: int64(len(body))}, nil
}

// ErrChanged: a spilled body did not read back as it was written.
var ErrChanged = errors.New("spilled body changed while parked")

// Get reads a spilled body back and checks that it is, byte for byte,
// what was spilled (its sha256): what an approver approved is what runs.
func (s *Store) Get(sp *Body) ([]byte, error) {
	defer runtime.KeepAlive(s.dir)
	fd, err := unix.Openat(s.fd(), sp.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("read spilled %s: %w", sp.name, err)
	}
	f := os.NewFile(uintptr(fd), sp.name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("read spilled %s: %w", sp.name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != sp.size {
		return nil, fmt.Errorf("read spilled %s: %w (size %d, want %d)", sp.name, ErrChanged, st.Size, sp.size)
	}
	body := make([]byte, sp.size)
	if _, err := io.ReadFull(f, body); err != nil {
		return nil, fmt.Errorf("read spilled %s: %w", sp.name, err)
	}
	sum := sha256.Sum256(body)
	if "sha256:"+hex.EncodeToString(sum[:]) != sp.digest {
		return nil, fmt.Errorf("read spilled %s: %w (digest)", sp.name, ErrChanged)
	}
	return body, nil
}

// Remove deletes a spilled body; the call it belonged to has ended (or
// has its body back in hand).
func (s *Store) Remove(sp *Body) {
	defer runtime.KeepAlive(s.dir)
	_ = unix.Unlinkat(s.fd(), sp.name, 0)
}
