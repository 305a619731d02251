package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/opencontainers/runc/libcontainer/exeseal"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/inithandoff"
)

// InitName is the container init's file name: the default is the one
// beside the helper (both beside sluiced once installed).
const InitName = "sluice-init"

// initProtocol is what "sluice-init protocol" prints first
// (cmd/sluice-init), followed by "runc VERSION".
const initProtocol = "sluice-init 1"

// ErrInitBinary is wrapped by every refusal of the configured init.
var ErrInitBinary = errors.New("container init binary refused")

// sealInit checks the init binary at path and returns a sealed memfd copy
// of it, which every container's init process runs (internal/inithandoff).
//
// The binary runs as root in every container (until libcontainer's init
// drops to the container's uid and execs the helper), so whoever can
// change it is root on the host: path must resolve to a regular,
// executable file owned by root and writable by no one else, through
// directories owned by root that no one else can write to (or sticky
// ones, like /tmp, where no one else can replace root's entries). Each is
// checked by fstat on the fd it was opened as, never by name again.
//
// CVE-2019-5736: while a container's init runs, /proc/PID/exe of a process
// of the container is the init binary; a container that could write to
// it would replace what every later container's init runs. The copy is a
// memfd with every seal (F_SEAL_SEAL, SHRINK, GROW, WRITE, as libcontainer
// seals its own clone), made once here: no one can write to it, through
// any path or magic link, and a later change to the file on disk is not
// run until sluiced restarts and checks it again. docs/sandbox.md.
func sealInit(path string) (*os.File, error) {
	if !inithandoff.Linked {
		return nil, fmt.Errorf("%w: this binary was built without cgo, so a container's init cannot be handed to %s", ErrNotSupported, InitName)
	}
	f, err := openInit(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	mem, seal, err := exeseal.Memfd(InitName)
	if err != nil {
		return nil, fmt.Errorf("sandbox init %s: a memfd to seal it in: %w", path, err)
	}
	n, err := io.Copy(mem, f)
	if err == nil && n != st.Size() {
		err = fmt.Errorf("copied %d of %d bytes", n, st.Size())
	}
	if err == nil {
		err = seal(&mem)
	}
	if err == nil {
		err = checkInitProtocol(mem)
	}
	if err != nil {
		mem.Close()
		return nil, fmt.Errorf("sandbox init %s: %w", path, err)
	}
	return mem, nil
}

// openInit opens the init binary for reading after the checks sealInit
// describes, walking from / one component at a time with O_NOFOLLOW
// after symlinks in path are resolved once: what is checked is what is
// opened.
func openInit(path string) (*os.File, error) {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s (whoever can change it is root in every container; 'make build' as root and scripts/install.sh install it root-owned 0755)",
			ErrInitBinary, path, fmt.Sprintf(format, args...))
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, refuse("%v", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, refuse("%v", err)
	}
	dirfd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, refuse("open /: %v", err)
	}
	defer func() { unix.Close(dirfd) }()
	checkDir := func(fd int, name string) error {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return refuse("stat %s: %v", name, err)
		}
		if st.Uid != 0 {
			return refuse("directory %s is owned by uid %d, not root", name, st.Uid)
		}
		if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
			return refuse("directory %s is writable by group or others (mode %#o)", name, st.Mode&0o7777)
		}
		return nil
	}
	if err := checkDir(dirfd, "/"); err != nil {
		return nil, err
	}
	parts := strings.Split(strings.TrimPrefix(real, "/"), "/")
	for i, name := range parts[:len(parts)-1] {
		fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, refuse("open %s: %v", "/"+filepath.Join(parts[:i+1]...), err)
		}
		unix.Close(dirfd)
		dirfd = fd
		if err := checkDir(dirfd, "/"+filepath.Join(parts[:i+1]...)); err != nil {
			return nil, err
		}
	}
	fd, err := unix.Openat(dirfd, parts[len(parts)-1], unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, refuse("open %s: %v", real, err)
	}
	f := os.NewFile(uintptr(fd), real)
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	switch {
	case err != nil:
		err = refuse("stat %s: %v", real, err)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = refuse("%s is not a regular file", real)
	case st.Uid != 0:
		err = refuse("%s is owned by uid %d, not root", real, st.Uid)
	case st.Mode&0o022 != 0:
		err = refuse("%s is writable by group or others (mode %#o)", real, st.Mode&0o7777)
	case st.Mode&0o100 == 0:
		err = refuse("%s is not executable (mode %#o)", real, st.Mode&0o7777)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkInitProtocol runs the sealed copy with "protocol": it must be
// sluice-init (not, say, sluiced or the helper given by mistake) built
// against this binary's libcontainer, whose private protocol the init
// and its parent speak. It also proves that the memfd may be executed
// (vm.memfd_noexec).
func checkInitProtocol(mem *os.File) error {
	cmd := exec.Command("/proc/self/fd/3", "protocol")
	cmd.ExtraFiles = []*os.File{mem} // fd 3 in the child, whatever mem's number here
	cmd.Env = []string{}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%w: not %s: %q protocol: %v: %s", ErrInitBinary, InitName, InitName, err, bytes.TrimSpace(stderr.Bytes()))
	}
	words := strings.Fields(string(out))
	if len(words) != 4 || strings.Join(words[:2], " ") != initProtocol || words[2] != "runc" {
		return fmt.Errorf("%w: not %s: %q from its protocol", ErrInitBinary, InitName, bytes.TrimSpace(out))
	}
	if want := runcVersion(); words[3] != want && want != "unknown" && words[3] != "unknown" {
		return fmt.Errorf("%w: built with runc %s, sluiced with %s: rebuild both ('make build')", ErrInitBinary, words[3], want)
	}
	return nil
}

// runcVersion is the libcontainer version this binary was built with.
func runcVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/opencontainers/runc" {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "unknown"
}
