package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/profiles"
	"github.com/sluicehq/sluice/sandbox"
)

// execTool is an execute tool made ready: its mounts resolved to fds
// beneath base, its container spec, and its warm pool.
type execTool struct {
	spec    *sandbox.Spec
	pool    *sandbox.Pool // nil with pool 0
	handles []*securefs.Handle
}

func (e *execTool) close() {
	if e.pool != nil {
		e.pool.Close() // before the mount fds go: the filler reads them
	}
	for _, h := range e.handles {
		h.Close()
	}
}

// buildExec resolves an execute tool's mounts beneath base (each one an fd
// the container's mount is made from, never a path looked up again) and
// builds its spec. Errors name the manifest key.
func buildExec(name string, t *authz.Tool, base *securefs.Root, baseDir string, seccompCache map[string]*sandbox.Profile) (*execTool, error) {
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
	spec := &sandbox.Spec{UID: sandbox.DefaultUID, GID: sandbox.DefaultUID}
	for i, m := range t.Mounts {
		h, err := base.Resolve(filepath.Clean(m))
		if err != nil {
			return fail(fmt.Errorf("manifest: %s.mounts[%d]: %q: %w", key, i, m, err))
		}
		e.handles = append(e.handles, h)
		if h.Kind != securefs.KindDir && h.Kind != securefs.KindFile {
			return fail(fmt.Errorf("manifest: %s.mounts[%d]: %q is a %s; mount a directory or a regular file", key, i, m, h.Kind))
		}
		dest, err := h.Path()
		if err != nil {
			return fail(err)
		}
		if err := sandbox.CheckDest(dest); err != nil {
			return fail(fmt.Errorf("manifest: %s.mounts[%d]: %w", key, i, err))
		}
		spec.Mounts = append(spec.Mounts, sandbox.Mount{File: h.File(), Dest: dest})
	}
	switch {
	case t.Cwd == "" && len(spec.Mounts) > 0:
		spec.Cwd = spec.Mounts[0].Dest
		if st, _ := os.Stat(spec.Cwd); st != nil && !st.IsDir() {
			spec.Cwd = "/tmp"
		}
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
	spec.Limits = sandbox.Limits{
		MemoryBytes: orDefault(t.MemoryMB, authz.DefaultMemoryMB) << 20,
		Pids:        orDefault(t.Pids, authz.DefaultPids),
		CPUs:        t.CPUs,
		Timeout:     time.Duration(orDefault(t.TimeoutMS, authz.DefaultTimeoutMS)) * time.Millisecond,
	}
	prof := t.Seccomp
	if cached, ok := seccompCache[prof]; ok {
		spec.Seccomp = cached
	} else {
		data := profiles.DefaultSeccomp
		if prof != "" {
			p := prof
			if !filepath.IsAbs(p) {
				p = filepath.Join(baseDir, p)
			}
			if data, err = os.ReadFile(p); err != nil {
				return fail(fmt.Errorf("manifest: %s.seccomp: %w", key, err))
			}
		}
		sc, err := sandbox.ParseSeccomp(data)
		if err != nil {
			return fail(fmt.Errorf("manifest: %s.seccomp: %w", key, err))
		}
		spec.Seccomp = sc
		seccompCache[prof] = sc
	}
	if len(t.Never) > 0 {
		// A command sees its mounts, minus what never hides: the same
		// globs as for file tools, relative to each mount.
		spec.Hide = func(rel string) bool { return authz.NeverMatch(t, rel) }
	}
	e.spec = spec
	return e, nil
}

func orDefault(v, def int64) int64 {
	if v > 0 {
		return v
	}
	return def
}

// runExec runs an allowed execute call: a warm box from the pool, or a
// cold one; the argv handed over is the one authorized (the manifest's
// own, when the request omitted it). It holds a container slot from taking
// the box until the command has ended.
func (c *call) runExec(onChunk func(stream string, data []byte)) *outcome {
	et := c.p.exec[c.req.Tool]
	if et == nil || c.p.runner == nil {
		c.d.log.Error("execute tool has no sandbox", "tool", c.req.Tool)
		return &outcome{reason: api.ReasonInternalError}
	}
	argv := c.areq.Argv
	if argv == nil {
		argv = c.tool.Commands[0]
	}
	if o := c.waitSlot(); o != nil {
		return o
	}
	defer c.d.slots.release()
	var box *sandbox.Box
	if et.pool != nil {
		box = et.pool.Get()
	}
	if box == nil {
		var err error
		if box, err = c.p.runner.Create(et.spec); err != nil {
			c.d.log.Error("create sandbox", "err", err, "tool", c.req.Tool, "call_id", c.id)
			return &outcome{reason: api.ReasonInternalError}
		}
	}
	var emit func(sandbox.Chunk)
	if onChunk != nil {
		emit = func(ch sandbox.Chunk) { onChunk(ch.Stream, ch.Data) }
	}
	res, err := box.Exec(c.ctx, argv, c.tool.EffectiveMaxBytes(), emit)
	if err != nil && res == nil {
		c.d.log.Error("sandbox exec", "err", err, "call_id", c.id)
		return &outcome{reason: api.ReasonInternalError}
	}
	code := res.ExitCode
	o := &outcome{output: res.Stdout, stderr: res.Stderr, truncated: res.Truncated, exitCode: &code}
	switch {
	case res.OOM || res.PidsMax:
		o.reason = api.ReasonLimitExceeded
	case res.TimedOut:
		o.reason = api.ReasonTimeout
	case errors.Is(err, context.Canceled):
		o.reason = api.ReasonInternalError // the caller went away; nothing is returned anyway
	default:
		o.reason = api.ReasonAllowed
		o.ok = code == 0
	}
	return o
}

func validStderr(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }
