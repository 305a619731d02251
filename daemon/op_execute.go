//go:build linux

package daemon

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/daemon/policyfiles"
	"github.com/sluicehq/sluice/egress/netpolicy"
	"github.com/sluicehq/sluice/internal/fsview"
	"github.com/sluicehq/sluice/internal/secretscan"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/profiles"
	"github.com/sluicehq/sluice/sandbox"
)

// execTool is an execute tool made ready: its mounts resolved to root fds
// beneath base, then served by its view, its container spec, and its warm
// pool.
type execTool struct {
	spec   *sandbox.Spec
	pool   *sandbox.Pool // nil with pool and pool_max 0
	view   *sandbox.View
	mounts []sandbox.ViewMount // until start hands them to the view
	hide   func(int, string) bool
	links  bool              // refuse hard-linked files (authz.Tool.RefusesHardLinks)
	egress *netpolicy.Policy // nil: no network (see exec_egress.go)
	// args are what its commands' path elements resolve arguments
	// against (exec_args.go).
	args argRoots
	// writes, when set, is what its commands may change through a
	// scratch layer (exec_changeset.go).
	writes *writeSet
	// cache lists the container paths backed by a cache per principal
	// (exec_cache.go); such a tool keeps no pool.
	cache []string
}

func (e *execTool) close() {
	if e.pool != nil {
		e.pool.Close() // before the view goes: the filler binds it
	}
	if e.view != nil {
		e.view.Close()
	}
	for _, m := range e.mounts {
		m.Source.Root.Close()
	}
	e.mounts = nil
	e.args.close()
	if e.writes != nil {
		e.writes.close()
	}
}

// start mounts the tool's view (it takes the mounts' roots) and fills in
// the spec's binds; then the pool, if any, starts filling.
func (e *execTool) start(name string, r *sandbox.Runner, pool sandbox.PoolSize, log *slog.Logger) error {
	mounts := e.mounts
	e.mounts = nil
	if len(mounts) > 0 {
		v, err := r.NewView(mounts, e.hide, int(e.spec.Limits.OpenFiles), e.links)
		if err != nil {
			return fmt.Errorf("tools.%s: view of its mounts: %w", name, err)
		}
		e.view = v
		e.spec.Mounts = v.Mounts
		e.spec.View = v // it answers only this tool's live containers
	}
	if pool.Max > 0 {
		e.pool = sandbox.NewPoolSized(r, e.spec, pool, log.With("tool", name))
	}
	return nil
}

// loadExec readies an execute tool when the manifest loads (opSpec.load):
// its mounts resolved beneath the manifest's base, its spec; pools start
// once the whole load has succeeded (loadPolicyWith).
func loadExec(p *policy, name string, t *authz.Tool, files *policyfiles.Files) error {
	et, err := buildExec(name, t, p.base, p.m.BaseDir, files)
	if err != nil {
		return err
	}
	p.exec[name] = et
	return nil
}

// buildExec resolves an execute tool's mounts beneath base (each one a
// root fd its view serves from, never a path looked up again) and builds
// its spec. Errors name the manifest key.
func buildExec(name string, t *authz.Tool, base *securefs.Root, baseDir string, files *policyfiles.Files) (*execTool, error) {
	key := "tools." + name
	e := &execTool{}
	fail := func(err error) (*execTool, error) {
		e.close()
		return nil, err
	}
	basePath, err := base.Path()
	if err != nil {
		return fail(err)
	}
	spec := &sandbox.Spec{} // the runner gives each container its own uid
	e.spec = spec
	var dests []string
	for i, m := range t.Mounts {
		vm, err := resolveMount(base, filepath.Clean(m))
		if err != nil {
			return fail(fmt.Errorf("manifest: %s.mounts[%d]: %q: %w", key, i, m, err))
		}
		e.mounts = append(e.mounts, vm)
		if err := sandbox.CheckDest(vm.Dest); err != nil {
			return fail(fmt.Errorf("manifest: %s.mounts[%d]: %w", key, i, err))
		}
		// A mount inside another would be set up through the outer one's
		// contents, which the workspace controls: refuse overlaps.
		for j, d := range dests {
			if d == vm.Dest || strings.HasPrefix(vm.Dest, d+"/") || strings.HasPrefix(d, vm.Dest+"/") {
				return fail(fmt.Errorf("manifest: %s.mounts[%d] %q overlaps %s.mounts[%d] %q (both are %s and %s on the host); mount one directory that holds both, or two that do not nest",
					key, i, m, key, j, t.Mounts[j], vm.Dest, d))
			}
		}
		dests = append(dests, vm.Dest)
	}
	if len(t.Never) > 0 {
		// A command sees its mounts minus what never hides: the same
		// globs as for file tools, relative to each mount.
		e.hide = func(_ int, rel string) bool { return authz.NeverMatch(t, rel) }
	}
	e.links = t.RefusesHardLinks()
	cwdDefault := ""
	if len(dests) > 0 {
		cwdDefault = dests[0]
		if e.mounts[0].Source.Name != "" {
			cwdDefault = "/tmp" // the first mount is a file
		}
	}
	switch {
	case t.Cwd == "" && cwdDefault != "":
		spec.Cwd = cwdDefault
	case t.Cwd == "":
		spec.Cwd = "/tmp"
	case filepath.IsAbs(t.Cwd):
		spec.Cwd = filepath.Clean(t.Cwd)
	default:
		spec.Cwd = filepath.Join(basePath, t.Cwd)
	}
	path := sandbox.DefaultPath
	if p, ok := t.Env["PATH"]; ok {
		path = p
	}
	spec.Env = []string{"PATH=" + path}
	keys := make([]string, 0, len(t.Env))
	for k := range t.Env {
		if k != "PATH" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		spec.Env = append(spec.Env, k+"="+t.Env[k])
	}
	if err := e.prepareEgress(key, t); err != nil {
		return fail(err)
	}
	if err := e.args.open(key, t, base, basePath, spec.Cwd); err != nil {
		return fail(err)
	}
	if err := e.loadWrites(key, t, base, basePath); err != nil {
		return fail(err)
	}
	e.cache = t.Cache
	spec.Limits = sandbox.Limits{
		MemoryBytes: orDefault(t.MemoryMB, authz.DefaultMemoryMB) << 20,
		Pids:        orDefault(t.Pids, authz.DefaultPids),
		CPUs:        t.CPUs,
		Timeout:     time.Duration(orDefault(t.TimeoutMS, authz.DefaultTimeoutMS)) * time.Millisecond,
		OpenFiles:   t.EffectiveMaxOpenFiles(),
	}
	prof := t.Seccomp
	if cached, ok := files.Seccomp[prof]; ok {
		spec.Seccomp = cached
	} else {
		data := profiles.DefaultSeccomp
		if prof != "" {
			p := prof
			if !filepath.IsAbs(p) {
				p = filepath.Join(baseDir, p)
			}
			// Read through the walk that records where it lies: no
			// write root may reach it (Files.CheckWrites).
			if data, err = files.Read(key+".seccomp", p); err != nil {
				return fail(fmt.Errorf("manifest: %s.seccomp: %w", key, err))
			}
		}
		sc, err := sandbox.ParseSeccomp(data)
		if err != nil {
			return fail(fmt.Errorf("manifest: %s.seccomp: %w", key, err))
		}
		spec.Seccomp = sc
		files.Seccomp[prof] = sc
	}
	return e, nil
}

// resolveMount opens what a mount path names beneath base. A directory
// becomes a root of its own; a regular file becomes its name in its
// directory, looked up again (never following a link) at every open.
func resolveMount(base *securefs.Root, rel string) (sandbox.ViewMount, error) {
	h, err := base.Resolve(rel)
	if err != nil {
		return sandbox.ViewMount{}, err
	}
	defer h.Close()
	switch h.Kind {
	case securefs.KindDir:
		root, err := base.RootOf(h)
		if err != nil {
			return sandbox.ViewMount{}, err
		}
		dest, err := root.Path()
		if err != nil {
			root.Close()
			return sandbox.ViewMount{}, err
		}
		return sandbox.ViewMount{Source: fsview.Source{Root: root}, Dest: dest}, nil
	case securefs.KindFile:
		abs, err := h.Path()
		if err != nil {
			return sandbox.ViewMount{}, err
		}
		_, frel, err := base.Locate(h)
		if err != nil {
			return sandbox.ViewMount{}, err
		}
		parent, err := base.OpenRootBeneath(filepath.Dir(frel))
		if err != nil {
			return sandbox.ViewMount{}, err
		}
		return sandbox.ViewMount{Source: fsview.Source{Root: parent, Name: filepath.Base(abs)}, Dest: abs}, nil
	}
	return sandbox.ViewMount{}, fmt.Errorf("is a %s; mount a directory or a regular file", h.Kind)
}

func orDefault(v, def int64) int64 {
	if v > 0 {
		return v
	}
	return def
}

// poolWait bounds how long an execute call waits for its tool's pool to
// make a box (sandbox.Pool.GetWait) before it creates one cold: about 40
// cold starts' time on an idle machine, so only a pool that stopped
// making boxes without failing is waited out.
const poolWait = time.Second

// coldBox is what startCold's creation gave: a box, or why there is none.
type coldBox struct {
	box *sandbox.Box
	err error
}

// coldStart is the box startCold is making: the call's prepared work.
type coldStart chan coldBox

// startCold begins making an allowed execute call's box while its
// decision is made durable (a call with effects, a command with egress:
// an effect-free call does not wait for that sync, and runExec makes its
// box at once), when its tool keeps no pool (every call
// starts cold) and a container slot is free at once: the container's
// start, the longest part of a cold call, then overlaps the decision's
// fdatasync instead of following it. Making a box has no effect outside
// it (a pool makes its boxes before any call); its command is handed
// over only in runExec, after the sync, and a box made for a call that
// ends first (the sync failed, the call was cancelled) is destroyed
// unused (coldStart.drop, runExec). A tool with a pool waits for the
// pool as before, and a call that would queue for a slot queues after its
// sync, so no box is ever made beyond --max-containers.
func (c *call) startCold() {
	et := c.p.exec[c.req.Tool]
	if et == nil || et.pool != nil || c.p.runner == nil || c.ctx.Err() != nil || !c.d.slots.TryAcquire(c.owner) {
		return
	}
	ch := make(coldStart, 1)
	c.prepared = ch
	runner, spec := c.p.runner, et.spec
	opt, err := c.createOptions(et)
	if err != nil {
		ch <- coldBox{nil, err}
		return
	}
	go func() {
		box, err := runner.CreateWith(spec, opt)
		ch <- coldBox{box, err}
	}()
}

// drop waits for a box that startCold began for a call that ended before
// runExec took it, destroys it unused and gives its slot back.
func (ch coldStart) drop(c *call) {
	r := <-ch
	if r.box != nil {
		r.box.Release()
	}
	c.d.slots.Release(c.owner)
}

// runExec runs an allowed execute call: a warm box from the pool (waiting
// for the pool's next box when it is making one), or a cold one; the argv
// handed over is the one authorized (the manifest's own, when the request
// omitted it). It holds a container slot from taking
// the box until the command has ended.
func (c *call) runExec(onChunk func(stream string, data []byte)) *outcome {
	et := c.p.exec[c.req.Tool]
	if et == nil || c.p.runner == nil {
		c.d.log.Error("execute tool has no sandbox", "tool", c.req.Tool)
		return &outcome{reason: api.ReasonInternalError}
	}
	var argv []string
	if ea, ok := c.areq.Args.(*authz.ExecArgs); ok {
		argv = ea.Argv
	}
	if argv == nil {
		argv, _ = c.tool.OnlyCommand() // Decide allowed it: there is one
	}
	var box *sandbox.Box
	var createErr error
	if cold, ok := c.prepared.(coldStart); ok {
		// startCold took the slot and began the box while the decision
		// was made durable.
		c.prepared = nil
		defer c.d.slots.Release(c.owner)
		r := <-cold
		box, createErr = r.box, r.err
	} else {
		if o := c.waitSlot(); o != nil {
			return o
		}
		defer c.d.slots.Release(c.owner)
		if et.pool != nil {
			box = et.pool.GetWait(c.ctx, poolWait)
		}
	}
	if c.ctx.Err() != nil {
		// Cancelled, shut down or gone while it waited: the command
		// must not start, and no cold box is made for it (one made
		// already goes unused).
		if box != nil {
			box.Release()
		}
		return &outcome{reason: c.endReason()}
	}
	c.d.m.poolGet(c.req.Tool, box != nil && et.pool != nil)
	if box == nil && createErr == nil {
		var opt sandbox.CreateOptions
		if opt, createErr = c.createOptions(et); createErr == nil {
			box, createErr = c.p.runner.CreateWith(et.spec, opt)
		}
	}
	if createErr != nil {
		// ENOSPC no_space; EMFILE busy; every container uid in use busy
		// (sandbox.IDsExhaustedError: nothing ran, a retry may succeed), …
		return &outcome{reason: c.reasonOf(createErr, "create sandbox for "+c.req.Tool)}
	}
	var emit func(sandbox.Chunk)
	if onChunk != nil {
		emit = func(ch sandbox.Chunk) { onChunk(ch.Stream, ch.Data) }
	}
	stopEgress := c.serveEgress(et, box)
	// The box is destroyed, and its pool refilled, once the reply is out
	// (see sandbox.Box.ExecHeld): pipeline and handleCall release it.
	c.held = box
	c.ranAt = time.Now()
	res, err := box.ExecHeld(c.ctx, argv, c.tool.EffectiveMaxBytes(), emit)
	c.scratch = box.TakeScratch() // nil without writes; exec_changeset.go reads it
	if !stopEgress() {
		return &outcome{reason: api.ReasonAuditUnavailable}
	}
	if err != nil && res == nil {
		return &outcome{reason: c.reasonOf(err, "sandbox exec")}
	}
	code := res.ExitCode
	er := &execResult{stderr: res.Stderr, exitCode: &code}
	o := &outcome{output: res.Stdout, truncated: res.Truncated, result: er}
	switch {
	case res.OOM || res.PidsMax:
		o.reason = api.ReasonLimitExceeded
	case res.TimedOut:
		o.reason = api.ReasonTimeout
	case err != nil: // the call's context ended: task_cancelled, shutdown, or the client went away
		o.reason = c.reasonOf(err, "sandbox exec")
	case res.Signal != 0:
		o.reason, er.signal, er.exitCode = api.ReasonKilled, signalName(res.Signal), nil
		c.d.log.Warn("a command died by a signal sluiced did not send", "signal", er.signal,
			"tool", c.req.Tool, "call_id", c.id)
	default:
		o.reason = api.ReasonAllowed
		o.ok = code == 0
	}
	return o
}

// signalName names a signal the way the result's signal field does
// ("SIGKILL"). A signal death that sluice did not cause (not its timeout
// kill, not the OOM killer at the tool's limit, not a task cancel or a
// shutdown) is reason killed with no exit code: the shell's 128+N would
// read as an ordinary exit, and a command that exits 137 by itself stays
// allowed with exit_code 137. That covers a process on the host killing
// the container (an operator, another daemon, systemd) and a command the
// kernel kills for a fault (SIGSEGV, SIGBUS); a command cannot kill itself
// with a signal it does not handle, as PID 1 of its pid namespace.
func signalName(sig int) string {
	if n := unix.SignalName(syscall.Signal(sig)); n != "" {
		return n
	}
	return "SIG" + strconv.Itoa(sig)
}

func validStderr(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }

// execResult is what a command that ran left beside its stdout: its
// stderr, and its exit code or the signal that killed it.
type execResult struct {
	stderr   []byte
	exitCode *int
	signal   string // what killed the command, when sluice did not (reason killed)
	cs       *csRun // what it changed, with writes (exec_changeset.go)
}

func (r *execResult) wire(res *api.CallResult) {
	res.ExitCode, res.Signal, res.Stderr = r.exitCode, r.signal, validStderr(r.stderr)
	r.cs.wire(res)
}

func (r *execResult) record(rec *audit.Record) {
	rec.Result.ExitCode, rec.Result.Signal = r.exitCode, r.signal
	r.cs.record(rec)
}

func (r *execResult) answered() bool { return r.exitCode != nil || r.signal != "" }

// checkExecMounts refuses a command's mount through which a container
// could read a credential value file (docs/manifest.md, "credentials"):
// run once every tool has loaded, so every value file is known.
func checkExecMounts(p *policy, name string, files *policyfiles.Files) error {
	et := p.exec[name]
	if et == nil {
		return nil
	}
	for i, vm := range et.mounts {
		if err := files.CheckSecretMount(fmt.Sprintf("tools.%s.mounts[%d] (%s)", name, i, vm.Dest), vm.Source.Root, vm.Source.Name); err != nil {
			return err
		}
	}
	return nil
}

// redactExtra redacts a command's stderr, capped as its stdout is.
func (r *execResult) redactExtra(s *secretscan.Scanner, max int64) secretscan.Counts {
	out, n := s.Redact(r.stderr)
	if n.Total() > 0 {
		r.stderr = out[:min(int64(len(out)), max)]
	}
	return n
}
