//go:build linux

package transport

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockName is the lock file every sluiced holds in its run dir and in its
// state dir for as long as it runs.
const lockName = ".sluiced.lock"

// DirLock is an exclusive flock on DIR/.sluiced.lock, held for the
// daemon's life. A second sluiced on the same run dir used to sweep it
// (killing the first one's running commands, unmounting its views,
// dropping its /etc dirs) and the write-temp journal before the ledger's
// lock refused it; now both dirs are locked before anything in them is
// read, swept or mounted, and a refused daemon changes nothing.
type DirLock struct {
	f *os.File
}

// ErrInUse is returned when another sluiced holds a dir's (or a
// socket's) lock.
var ErrInUse = errors.New("in use by another daemon")

// LockDirs locks each dir ({what, path}) in order (a dir named twice, or two names of
// one dir, is locked once). On error, the locks already taken are
// released.
func LockDirs(dirs ...[2]string) ([]*DirLock, error) {
	var locks []*DirLock
	for _, d := range dirs {
		l, err := lockDir(d[0], d[1], locks)
		if err != nil {
			UnlockAll(locks)
			return nil, err
		}
		if l != nil {
			locks = append(locks, l)
		}
	}
	return locks, nil
}

// UnlockAll releases locks.
func UnlockAll(locks []*DirLock) {
	for _, l := range locks {
		l.f.Close() // closing the last fd of the open file description drops the flock
	}
}

// lockDir creates dir if missing (its parents 0750, as the socket dir
// they may be; itself 0700) and takes its lock without waiting. The lock
// file is opened O_CLOEXEC: no container init or command ever inherits it
// (libcontainer re-executes sluiced for a container's init, and exec
// closes it), so a lock never outlives the daemon in a container. held are
// locks this daemon already took: the same file again (the state dir
// is the run dir) is not locked twice, or flock would refuse our own.
func lockDir(what, dir string, held []*DirLock) (*DirLock, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("%s %s: %w", what, dir, err)
	}
	return lockFile(what+" "+dir, filepath.Join(dir, lockName), held,
		"one daemon per run dir and state dir: give this one its own --run-dir and --state-dir")
}

// lockFile takes an exclusive flock on the file p (created 0600) without
// waiting, and writes this process's pid in it. subject and hint word the
// refusal when another sluiced holds it.
func lockFile(subject, p string, held []*DirLock, hint string) (*DirLock, error) {
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NOCTTY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: lock: %w", subject, err)
	}
	f := os.NewFile(uintptr(fd), p)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("%s: lock %s is not a regular file (%v)", subject, p, err)
	}
	for _, h := range held {
		var hs unix.Stat_t
		if unix.Fstat(int(h.f.Fd()), &hs) == nil && hs.Dev == st.Dev && hs.Ino == st.Ino {
			f.Close()
			return nil, nil // already ours
		}
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := "pid unknown"
			if b, rerr := os.ReadFile(p); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
					holder = "pid " + strconv.Itoa(pid)
				}
			}
			return nil, fmt.Errorf("%s is %w (%s, lock %s); %s", subject, ErrInUse, holder, p, hint)
		}
		return nil, fmt.Errorf("%s: lock: %w", subject, err)
	}
	// The holder's pid, for the message a refused daemon prints. Only
	// the lock holder writes it.
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(pid, 0)
	}
	return &DirLock{f: f}, nil
}
