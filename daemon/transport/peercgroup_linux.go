//go:build linux

package transport

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// soPeerPidfd is SO_PEERPIDFD (Linux 6.5, asm-generic value 77 on every
// architecture sluice builds for); golang.org/x/sys does not name it yet.
const soPeerPidfd = 77

// errNoPeerPidfd: the kernel cannot name the peer process by a pidfd, so
// its cgroup cannot be read without a pid-reuse race.
var errNoPeerPidfd = errors.New("the kernel has no SO_PEERPIDFD (Linux 6.5 or later)")

// peerCgroup reads the cgroup v2 path of the process at the other end of
// the connected unix socket fd, without a pid-reuse race:
//
//  1. SO_PEERPIDFD gives a pidfd for the process that connected (the
//     kernel pinned it at connect; the peer cannot choose it);
//  2. the pidfd's fdinfo gives its pid now (-1 once it has exited);
//  3. /proc/PID/cgroup is read;
//  4. a null signal through the pidfd says the process still exists, so
//     PID was still its pid when step 3 read it (a pid is not reused while
//     its process, even a zombie, exists).
//
// Any failure is an error and the peer's cgroup stays unknown.
func peerCgroup(fd int) (string, error) {
	pidfd, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, soPeerPidfd)
	if err != nil {
		if errors.Is(err, unix.ENOPROTOOPT) || errors.Is(err, unix.EINVAL) {
			return "", errNoPeerPidfd
		}
		return "", fmt.Errorf("SO_PEERPIDFD: %w", err)
	}
	defer unix.Close(pidfd)
	pid, err := pidfdPid(pidfd)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", fmt.Errorf("read the peer's cgroup: %w", err)
	}
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		return "", fmt.Errorf("the peer exited while its cgroup was read: %w", err)
	}
	return unifiedPath(data)
}

// pidfdPid reads the "Pid:" line of a pidfd's fdinfo: the process's pid
// in our pid namespace, -1 once it has exited (and been reaped).
func pidfdPid(pidfd int) (int, error) {
	data, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(pidfd))
	if err != nil {
		return 0, fmt.Errorf("read the peer's pidfd: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("Pid:")); ok {
			pid, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil || pid <= 0 {
				return 0, errors.New("the peer has exited")
			}
			return pid, nil
		}
	}
	return 0, errors.New("the pidfd's fdinfo has no Pid line")
}

// unifiedPath returns the cgroup v2 path of a /proc/PID/cgroup: the
// "0::PATH" line, which a hybrid host (systemd's unified hierarchy beside
// v1 controllers) has too.
func unifiedPath(data []byte) (string, error) {
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if p, ok := bytes.CutPrefix(line, []byte("0::")); ok {
			if len(p) == 0 || p[0] != '/' {
				break
			}
			// A cgroup the process was in when it was removed.
			p, _ = bytes.CutSuffix(p, []byte(" (deleted)"))
			return string(p), nil
		}
	}
	return "", errors.New("the peer's /proc/PID/cgroup has no cgroup v2 (0::) line")
}

var (
	pidfdOnce sync.Once
	pidfdErr  error
)

// PeerCgroupSupported says whether this kernel can name a unix socket
// peer by a pidfd (SO_PEERPIDFD), which workload principals need. It
// asks once, on a socket pair of its own.
func PeerCgroupSupported() error {
	pidfdOnce.Do(func() {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			pidfdErr = fmt.Errorf("probe SO_PEERPIDFD: %w", err)
			return
		}
		defer unix.Close(fds[0])
		defer unix.Close(fds[1])
		_, pidfdErr = peerCgroup(fds[0])
		if pidfdErr != nil && !errors.Is(pidfdErr, errNoPeerPidfd) {
			// The kernel has the option; reading our own cgroup failed
			// for another reason (no cgroup v2 line): say that.
			pidfdErr = fmt.Errorf("the daemon cannot read its own cgroup v2 path: %w", pidfdErr)
		}
	})
	return pidfdErr
}
