//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"
)

// The methods that measure libcontainer alone, with the bundle's seccomp
// profile and without it.
const (
	libctName   = "libcontainer alone"
	libctNoSecc = "libcontainer, no seccomp"
)

// libct is a bin/libct process (bench/libct): libcontainer alone, on the
// same bundle as runc run, one cold container per request, each timed by
// the process itself (create, run, wait) so that the pipe to it is not in
// the figure.
type libct struct {
	cmd      *exec.Cmd
	in       io.WriteCloser
	out      *bufio.Scanner
	last     time.Duration   // the last request's create+run+wait
	destroys []time.Duration // each Destroy after it
}

// startLibct starts bin/libct on bundle (with args, e.g. --no-seccomp),
// its state in work/state, or returns nil (and says so) when bin has none
// (an older make build).
func startLibct(bin, bundle, work, state string, args ...string) *libct {
	path := filepath.Join(bin, "libct")
	if _, err := os.Stat(path); err != nil {
		fmt.Printf("libcontainer alone: not measured (%s missing: bench/exec.sh builds it)\n", path)
		return nil
	}
	cmd := exec.Command(path, append([]string{"--bundle", bundle, "--state", filepath.Join(work, state)}, args...)...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	check(err)
	out, err := cmd.StdoutPipe()
	check(err)
	check(cmd.Start())
	l := &libct{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	stopDaemons = append(stopDaemons, l.stop)
	return l
}

// run returns a method's call: argv in a new container.
func (l *libct) run(argv ...string) func() error {
	line, _ := json.Marshal(argv)
	line = append(line, '\n')
	return func() error {
		if _, err := l.in.Write(line); err != nil {
			return fmt.Errorf("libct: %w", err)
		}
		if !l.out.Scan() {
			return fmt.Errorf("libct ended: %v", l.out.Err())
		}
		var ran, destroyed int64
		if _, err := fmt.Sscan(l.out.Text(), &ran, &destroyed); err != nil {
			return fmt.Errorf("libct said %q: %v", l.out.Text(), err)
		}
		l.last = time.Duration(ran)
		l.destroys = append(l.destroys, time.Duration(destroyed))
		return nil
	}
}

// took is the last call's time as libct measured it.
func (l *libct) took() time.Duration { return l.last }

// destroyP50 is the median Destroy.
func (l *libct) destroyP50() time.Duration {
	if len(l.destroys) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), l.destroys...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return pct(s, 50)
}

func (l *libct) stop() {
	if l.in != nil {
		l.in.Close()
		l.in = nil
		l.cmd.Wait()
	}
}
