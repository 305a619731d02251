package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// cgroupMove measures what every new container pays the kernel to move
// its first process into fresh cgroups, the way libcontainer does it
// (writing the pid to cgroup.procs in each hierarchy), n times, space
// apart. After an idle spell a move waits for an RCU grace period (the
// cgroup_threadgroup_rwsem switching to its writer mode), ~10 ms on this
// project's machine, unless cgroup2 is mounted with favordynmods
// (docs/operating.md, "Cold starts and cgroup moves"). A cold call pays
// it; a pooled call's container paid it while the pool refilled.
func cgroupMove(n int, space time.Duration) (p50 time.Duration, hierarchies int, err error) {
	roots, err := cgroupRoots()
	if err != nil || len(roots) == 0 {
		return 0, 0, fmt.Errorf("no cgroup hierarchies found: %v", err)
	}
	var samples []time.Duration
	for i := range n {
		time.Sleep(space)
		d, err := moveOnce(roots, fmt.Sprintf("sluice-bench-move-%d-%d", os.Getpid(), i))
		if err != nil {
			return 0, len(roots), err
		}
		samples = append(samples, d)
	}
	slices.Sort(samples)
	return pct(samples, 50), len(roots), nil
}

func moveOnce(roots []string, name string) (time.Duration, error) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	var dirs []string
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		for _, d := range dirs {
			os.Remove(d)
		}
	}()
	for _, r := range roots {
		d := filepath.Join(r, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			return 0, err
		}
		dirs = append(dirs, d)
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} { // a v1 cpuset starts empty
			if b, err := os.ReadFile(filepath.Join(r, f)); err == nil && filepath.Base(r) != "unified" {
				os.WriteFile(filepath.Join(d, f), b, 0)
			}
		}
	}
	pid := []byte(strconv.Itoa(cmd.Process.Pid))
	t := time.Now()
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), pid, 0); err != nil {
			return 0, err
		}
	}
	return time.Since(t), nil
}

// cgroupRoots lists the mount points of the cgroup hierarchies.
func cgroupRoots() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var roots []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && (fields[i+1] == "cgroup" || fields[i+1] == "cgroup2") && fields[3] == "/" {
				roots = append(roots, fields[4])
			}
		}
	}
	return roots, sc.Err()
}
