//go:build linux

package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/daemon/policyfiles"
	"github.com/sluicehq/sluice/daemon/transport"
	"github.com/sluicehq/sluice/egress"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/sandbox"
)

// policy is a loaded manifest plus the root fds it resolves through. It is
// swapped atomically on reload; in-flight calls keep the one they started
// with, and its fds are closed when the last of them finishes.
type policy struct {
	m     *authz.Manifest
	path  string
	base  *securefs.Root
	roots map[string][]*securefs.Root // tool -> one per manifest root; nil where missing
	exec  map[string]*execTool        // execute tools
	// runner runs the execute tools' containers; set when there are any.
	runner *sandbox.Runner
	// creds are the fetch and post tools' credential values (op_net.go).
	creds map[string]*egress.Credentials

	users   atomic.Int64
	retired atomic.Bool
	once    sync.Once
}

// loadPolicy reads and validates the manifest and opens base and every
// file tool's roots. base must exist; a missing root is logged and its
// paths resolve to not_found until a reload finds it.
func loadPolicy(manifestPath string, mode securefs.Mode, log *slog.Logger) (*policy, error) {
	return loadPolicyWith(manifestPath, mode, log, nil)
}

// loadPolicyWith also readies execute tools: their mounts resolved to fds
// beneath base, their specs, and (with a runner) their warm pools. An
// execute tool without a runner is an error: nothing runs unconfined.
func loadPolicyWith(manifestPath string, mode securefs.Mode, log *slog.Logger, runner func() (*sandbox.Runner, error)) (*policy, error) {
	abs, err := filepath.Abs(manifestPath)
	if err != nil {
		return nil, err
	}
	files := policyfiles.New()
	data, err := files.Read("manifest", abs)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	m, err := authz.ParseFile(abs, bytes.NewReader(data), filepath.Dir(abs))
	if err != nil {
		return nil, err
	}
	warnSelfApproval(m, log)
	if err := workloadSupported(m); err != nil {
		return nil, err
	}
	base, err := securefs.OpenRoot(m.BaseDir, mode)
	if err != nil {
		return nil, fmt.Errorf("manifest base %s: %w", m.BaseDir, err)
	}
	p := &policy{m: m, path: abs, base: base, roots: map[string][]*securefs.Root{}, exec: map[string]*execTool{}}
	for name, t := range m.Tools {
		o := operations[t.Operation]
		if o == nil || o.load == nil {
			continue
		}
		if err := o.load(p, name, t, files); err != nil {
			p.close()
			return nil, err
		}
	}
	for name, t := range m.Tools {
		if len(t.Roots) == 0 {
			continue
		}
		rs := make([]*securefs.Root, len(t.Roots))
		for i, r := range t.Roots {
			root, err := base.OpenRootBeneath(filepath.Clean(r))
			switch {
			case err == nil:
				rs[i] = root
			case errors.Is(err, securefs.ErrNotExist):
				log.Warn("root does not exist; its paths are not_found until a reload finds it",
					"tool", name, "root", r, "base", m.BaseDir)
			default:
				p.close()
				return nil, fmt.Errorf("manifest: tools.%s.roots[%d]: %q: %w", name, i, r, err)
			}
		}
		if err := rootsAsKernelNames(base, t, rs); err != nil {
			p.close()
			return nil, fmt.Errorf("manifest: tools.%s.%w", name, err)
		}
		p.roots[name] = rs
	}
	if err := files.CheckWrites(m, p.roots); err != nil {
		p.close()
		return nil, err
	}
	for _, name := range m.ToolNamesAll() {
		if o := operations[m.Tools[name].Operation]; o != nil && o.loaded != nil {
			if err := o.loaded(p, name, files); err != nil {
				p.close()
				return nil, err
			}
		}
	}
	for _, name := range m.ToolNamesAll() {
		// A command's changeset writes beneath its writes roots as a
		// write tool would: the same check.
		if et := p.exec[name]; et != nil && et.writes != nil {
			if err := rootsAsKernelNames(base, et.writes.wt, et.writes.roots); err != nil {
				p.close()
				return nil, fmt.Errorf("manifest: tools.%s.writes.%w", name, err)
			}
			if err := files.CheckRoots("tools."+name+".writes.roots", m.Tools[name].Writes.Roots, et.writes.roots, "a command's changeset"); err != nil {
				p.close()
				return nil, err
			}
		}
	}
	// Pools start last, once nothing else can fail the load: they create
	// containers (tens of ms of CPU each) as soon as they exist.
	if len(p.exec) > 0 {
		if runner == nil {
			p.close()
			return nil, errors.New("manifest declares execute tools but no sandbox is available")
		}
		r, err := runner()
		if err != nil {
			p.close()
			return nil, fmt.Errorf("execute tools need the sandbox: %w", err)
		}
		p.runner = r
		for _, name := range m.ToolNamesAll() {
			if et := p.exec[name]; et != nil && len(et.cache) > 0 {
				if err := r.CheckCaches(); err != nil {
					p.close()
					return nil, fmt.Errorf("manifest: tools.%s.cache: this host cannot give commands caches: %w", name, err)
				}
				break
			}
		}
		for name, et := range p.exec {
			size := sandbox.PoolSize{Min: m.Tools[name].EffectivePool(), Max: m.Tools[name].EffectivePoolMax()}
			if len(et.cache) > 0 {
				size = sandbox.PoolSize{} // its boxes bind the caller's caches (exec_cache.go)
			}
			if err := et.start(name, r, size, log); err != nil {
				p.close()
				return nil, err
			}
		}
	}
	return p, nil
}

// pools is the policy's container pools by execute tool (nil for a tool
// that keeps none): what readiness (systemd.go) and the metrics watch.
func (p *policy) pools() map[string]*sandbox.Pool {
	m := make(map[string]*sandbox.Pool, len(p.exec))
	for name, et := range p.exec {
		m[name] = et.pool
	}
	return m
}

func (p *policy) close() {
	p.once.Do(func() {
		for _, et := range p.exec {
			et.close()
		}
		for _, rs := range p.roots {
			for _, r := range rs {
				if r != nil {
					r.Close()
				}
			}
		}
		p.base.Close()
	})
}

func (p *policy) release() {
	if p.users.Add(-1) == 0 && p.retired.Load() {
		p.close()
	}
}

func (p *policy) retire() {
	p.retired.Store(true)
	if p.users.Load() == 0 {
		p.close()
	}
}

// rootsAsKernelNames refuses, in a tool with two or more roots and never
// globs, a root the manifest does not spell as the kernel names it (a
// symlink on the way, or another case on a case-insensitive disk). Such a
// tool checks a path from every root it lies beneath (a never glob
// anchored at an inner root hides its files when they are reached beneath
// an outer one too), comparing roots as written: a root reached through a
// symlink would nest, or not, otherwise than its name says, and its files
// would escape its never globs beneath the other root (the fourth review's
// remaining case, docs/security.md).
func rootsAsKernelNames(base *securefs.Root, t *authz.Tool, rs []*securefs.Root) error {
	if len(t.Roots) < 2 || len(t.Never) == 0 {
		return nil
	}
	for i, root := range rs {
		if root == nil {
			continue // missing: not_found until a reload finds it
		}
		rel, err := base.RelOf(root)
		if err != nil {
			return fmt.Errorf("roots[%d]: locate %q: %w", i, t.Roots[i], err)
		}
		if rel != filepath.Clean(t.Roots[i]) {
			return fmt.Errorf("roots[%d]: %q is %q as the kernel names it (a symlink on the way, or another case): in a tool with several roots and never globs, write each root as the kernel names it", i, t.Roots[i], rel)
		}
	}
	return nil
}

// workloadSupported refuses a manifest with workload principals (units,
// cgroups) on a kernel that cannot name a peer by its pidfd: every peer's
// cgroup would be unknown, and so every peer nobody.
func workloadSupported(m *authz.Manifest) error {
	if !m.Workload() {
		return nil
	}
	if err := transport.PeerCgroupSupported(); err != nil {
		return fmt.Errorf("manifest: principals name units or cgroups, which need the peer's cgroup read race-free: %w", err)
	}
	return nil
}
