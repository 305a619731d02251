//go:build linux

// Command libct measures what libcontainer alone costs a cold container:
// the yardstick for what sluice's cold calls, which make their containers
// with it, add (docs/performance.md "2026-12-06: what libcontainer alone
// costs a cold container").
//
// It reads a runc bundle's config.json (bench/execbench makes the bundle
// it runs `runc run` on), converts it with libcontainer's specconv, as
// runc does, and then, for each line on stdin (a JSON argv), makes one
// container in this process and runs the argv in it as its init:
// libcontainer.Create, Container.Run, Process.Wait; then Destroy. It
// writes "RUN DESTROY\n" (nanoseconds: the create, run and wait; the
// destroy after it) once the container is gone. The config is converted
// before the clock starts; nothing else is done: no HTTP, no audit, no
// pool, no view, no helper. The container's init is this binary, run
// again as "libct init" from a sealed copy (libcontainer's default, as
// runc's), with only libcontainer's packages to initialize.
//
// --no-seccomp drops the bundle's seccomp profile: the container as
// before without the filter that libcontainer's init compiles and loads
// in each container (sluice's boxes load one compiled once), which is
// what libcontainer costs a container at the least on this bundle.
//
//	libct --bundle DIR --state DIR [--no-seccomp] < argv lines
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "github.com/opencontainers/cgroups/devices" // device rules, as runc registers them
	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A package init runs on the main thread, as libcontainer's init needs
// (runc calls it from the same place).
func init() {
	if len(os.Args) == 2 && os.Args[1] == "init" {
		libcontainer.Init() // never returns
	}
}

func main() {
	bundle := flag.String("bundle", "", "a runc bundle: its config.json and rootfs")
	state := flag.String("state", "", "libcontainer's state directory (made if missing)")
	noSeccomp := flag.Bool("no-seccomp", false, "drop the bundle's seccomp profile")
	flag.Parse()
	if *bundle == "" || *state == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: libct --bundle DIR --state DIR [--no-seccomp] < argv lines")
		os.Exit(2)
	}
	if err := run(*bundle, *state, *noSeccomp); err != nil {
		fmt.Fprintln(os.Stderr, "libct:", err)
		os.Exit(1)
	}
}

func run(bundle, state string, noSeccomp bool) error {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return err
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	if noSeccomp && spec.Linux != nil {
		spec.Linux.Seccomp = nil
	}
	// specconv resolves the rootfs against the working directory, as
	// runc run in the bundle does.
	if err := os.Chdir(bundle); err != nil {
		return err
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer devnull.Close()
	in := bufio.NewScanner(os.Stdin)
	for i := 0; in.Scan(); i++ {
		var argv []string
		if err := json.Unmarshal(in.Bytes(), &argv); err != nil || len(argv) == 0 {
			return fmt.Errorf("line %d: want a JSON argv", i+1)
		}
		id := fmt.Sprintf("libct-%d-%d", os.Getpid(), i)
		cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{CgroupName: id, Spec: &spec})
		if err != nil {
			return err
		}
		// An empty pipe for stdin (a nil one would be the host's
		// /dev/null, which the init cannot use); the output goes to
		// /dev/null, as the argv's is not read.
		inR, inW, err := os.Pipe()
		if err != nil {
			return err
		}
		inW.Close()
		p := &libcontainer.Process{
			Args: argv, Env: spec.Process.Env, UID: int(spec.Process.User.UID), GID: int(spec.Process.User.GID),
			Cwd: spec.Process.Cwd, NoNewPrivileges: &spec.Process.NoNewPrivileges,
			Stdin: inR, Stdout: devnull, Stderr: devnull, Init: true, LogLevel: "2",
		}
		t0 := time.Now()
		c, err := libcontainer.Create(state, id, cfg)
		if err != nil {
			inR.Close()
			return fmt.Errorf("create: %w", err)
		}
		err = c.Run(p)
		if err == nil {
			var st *os.ProcessState
			st, err = p.Wait()
			if err == nil && !st.Success() {
				err = fmt.Errorf("%q: %v", argv, st)
			}
		}
		ran := time.Since(t0)
		inR.Close()
		t1 := time.Now()
		derr := c.Destroy()
		destroyed := time.Since(t1)
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		if derr != nil {
			return fmt.Errorf("destroy: %w", derr)
		}
		fmt.Printf("%d %d\n", ran.Nanoseconds(), destroyed.Nanoseconds())
	}
	return in.Err()
}
