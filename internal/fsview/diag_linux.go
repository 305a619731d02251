package fsview

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Diag is what may keep a view serving after Close: its server stops only
// once the kernel ends the connection, when the last mount of it is gone
// (its own, detached by Close; each container's bind; a mount namespace
// another process or an nsfs fd still holds) and no request is left
// unanswered. The daemon logs it for a view still serving long after its
// containers were destroyed, so that the next occurrence names its cause.
type Diag struct {
	Dir      string
	Closed   bool     // Close was called
	Admitted []uint32 // uids still admitted: a container not destroyed (Revoke never came)
	Open     int      // files and directories the kernel has not released
	Watches  int
	// Conn is the kernel's connection (/sys/fs/fuse/connections/Conn);
	// Waiting is its count of requests sent and not yet answered (-1:
	// unknown, fusectl not mounted): a request stuck in a handler, or in
	// the kernel.
	Conn    uint32
	Waiting int
	// Holders are up to maxHolders mount namespaces that still hold the
	// view (its device in a process's /proc/PID/mountinfo), each with
	// the first process found in it: "mnt:[INO] PID:COMM". A namespace no
	// process is in (held by an nsfs fd) is not found: Admitted names the
	// containers not destroyed.
	Holders []string
}

const maxHolders = 8

// maxScan bounds the processes Diag reads the mount table of.
const maxScan = 4096

func (d Diag) String() string {
	return fmt.Sprintf("%s closed=%t admitted=%v open=%d watches=%d conn=%d waiting=%d holders=%v",
		d.Dir, d.Closed, d.Admitted, d.Open, d.Watches, d.Conn, d.Waiting, d.Holders)
}

// Diag reports what the view still holds (see Diag). It reads at most
// maxScan processes' mount tables.
func (v *View) Diag() Diag {
	d := Diag{Dir: v.dir, Closed: v.closed.Load(), Conn: v.conn, Waiting: -1, Watches: v.Watches()}
	v.mu.RLock()
	for uid := range v.uids {
		d.Admitted = append(d.Admitted, uid)
	}
	v.mu.RUnlock()
	slices.Sort(d.Admitted)
	v.hmu.Lock()
	d.Open = len(v.open)
	v.hmu.Unlock()
	if v.conn == 0 {
		return d
	}
	if b, err := os.ReadFile(fmt.Sprintf("/sys/fs/fuse/connections/%d/waiting", v.conn)); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			d.Waiting = n
		}
	}
	d.Holders = holders(fmt.Sprintf(" 0:%d ", v.conn))
	return d
}

// holders lists processes whose mountinfo has a line with dev (" 0:N ").
func holders(dev string) []string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	scanned := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if scanned++; scanned > maxScan || len(out) >= maxHolders {
			break
		}
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		if !mountsDev(pid, dev) {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		out = append(out, ns+" "+strconv.Itoa(pid)+":"+strings.TrimSpace(string(comm)))
	}
	return out
}

func mountsDev(pid int, dev string) bool {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		if line := sc.Bytes(); bytes.Contains(line, []byte(dev)) && bytes.Contains(line, []byte(" fuse.sluice ")) {
			return true
		}
	}
	return false
}

// connOf is the kernel's connection number of the FUSE file system
// mounted at dir: the minor of its device.
func connOf(dir string) uint32 {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0
	}
	return unix.Minor(st.Dev)
}
