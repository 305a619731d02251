package authz

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Caller is what the kernel says of a peer: the credentials it connected
// with and, where it could be read race-free, its cgroup v2 path.
type Caller struct {
	UID, GID uint32
	// Cgroup is the peer's cgroup v2 path ("/system.slice/agent.service"),
	// "" when it could not be read. A workload principal never matches an
	// unknown cgroup.
	Cgroup string
}

// workload says whether the principal is named by its workload (units or
// cgroups) rather than by its uids and gids alone.
func (p *Principal) workload() bool { return len(p.Units) > 0 || len(p.Cgroups) > 0 }

// Workload says whether any principal is named by its workload: the
// daemon then needs the peer's cgroup (SO_PEERPIDFD) to map anyone.
func (m *Manifest) Workload() bool {
	for _, p := range m.Principals {
		if p.workload() {
			return true
		}
	}
	return false
}

// Identify maps a peer to its principal (docs/manifest.md, "Principals"):
//
//  1. a workload principal (units or cgroups), in name order, whose unit
//     or cgroup glob matches the peer's cgroup and, when it lists uids or
//     gids, whose uids hold the peer's uid or gids its gid;
//  2. else, when the manifest has workload principals and the peer's
//     cgroup is unknown, nobody: a peer a workload principal may have
//     been meant to narrow never gets its uid's wider rights;
//  3. else the principal whose uids hold the peer's uid, then the one
//     whose gids hold its gid.
//
// Without declared principals every peer is LocalPrincipal.
func (m *Manifest) Identify(c Caller) (name string, ok bool) {
	if m.Principals == nil {
		return LocalPrincipal, true
	}
	names := sortedKeys(m.Principals)
	workload := false
	for _, n := range names {
		p := m.Principals[n]
		if !p.workload() {
			continue
		}
		workload = true
		if c.Cgroup != "" && p.matchesWorkload(c) {
			return n, true
		}
	}
	if workload && c.Cgroup == "" {
		return "", false
	}
	for _, n := range names {
		if p := m.Principals[n]; !p.workload() && slices.Contains(p.UIDs, c.UID) {
			return n, true
		}
	}
	for _, n := range names {
		if p := m.Principals[n]; !p.workload() && slices.Contains(p.GIDs, c.GID) {
			return n, true
		}
	}
	return "", false
}

func (p *Principal) matchesWorkload(c Caller) bool {
	if len(p.UIDs) > 0 || len(p.GIDs) > 0 {
		if !slices.Contains(p.UIDs, c.UID) && !slices.Contains(p.GIDs, c.GID) {
			return false
		}
	}
	if u := UnitOf(c.Cgroup); u != "" {
		for _, g := range p.Units {
			if ok, _ := path.Match(g, u); ok {
				return true
			}
		}
	}
	for _, g := range p.Cgroups {
		if cgroupMatch(g, c.Cgroup) {
			return true
		}
	}
	return false
}

// UnitOf returns the systemd unit a cgroup v2 path belongs to: its
// shallowest component that names a service or a scope
// ("/system.slice/agent@1.service/payload" → "agent@1.service"), "" for
// none. A delegated sub-cgroup belongs to the unit above it, whatever it
// is named: a service with Delegate=yes (and a user's systemd --user
// manager, user@UID.service) creates and names the cgroups beneath
// itself, so a component below the first unit is the workload's own
// choice and never names a unit ("/system.slice/a.service/x/b.service"
// is a.service, not b.service). Only the service manager, as root,
// creates the cgroups above.
func UnitOf(cgroup string) string {
	for c := range strings.SplitSeq(cgroup, "/") {
		if strings.HasSuffix(c, ".service") || strings.HasSuffix(c, ".scope") {
			return c
		}
	}
	return ""
}

// cgroupMatch matches a cgroup path glob as search matches a path glob
// (matchSegs): each component a path.Match pattern, "**" any number of
// components (none too). "/kubepods.slice/**" matches every cgroup beneath it.
func cgroupMatch(glob, cgroup string) bool {
	return matchSegs(strings.Split(strings.TrimPrefix(glob, "/"), "/"), strings.Split(strings.TrimPrefix(cgroup, "/"), "/"))
}

const maxWorkloadGlobs = 64

func validateWorkload(key string, p *Principal) error {
	if len(p.Units)+len(p.Cgroups) > maxWorkloadGlobs {
		return merr(key, "names %d units and cgroups; at most %d", len(p.Units)+len(p.Cgroups), maxWorkloadGlobs)
	}
	for i, g := range p.Units {
		k := fmt.Sprintf("%s.units[%d]", key, i)
		if g == "" || len(g) > 256 || strings.ContainsAny(g, "/\x00") {
			return merr(k, "%q is not a unit glob; give a unit name or glob such as \"agent@*.service\"", g)
		}
		if _, err := path.Match(g, ""); err != nil {
			return merr(k, "%q is not a valid glob: %v", g, err)
		}
		if !strings.HasSuffix(g, ".service") && !strings.HasSuffix(g, ".scope") && !strings.HasSuffix(g, "*") {
			return merr(k, "%q names no service or scope; a unit glob ends in \".service\", \".scope\" or \"*\"", g)
		}
	}
	for i, g := range p.Cgroups {
		k := fmt.Sprintf("%s.cgroups[%d]", key, i)
		if !strings.HasPrefix(g, "/") || len(g) > 1024 || strings.ContainsRune(g, 0) {
			return merr(k, "%q is not a cgroup path glob; give an absolute cgroup v2 path as /proc/PID/cgroup shows it after \"0::\", e.g. \"/kubepods.slice/**\"", g)
		}
		for _, c := range strings.Split(strings.TrimPrefix(g, "/"), "/") {
			if c == "" || c == "." || c == ".." {
				return merr(k, "%q has an empty, \".\" or \"..\" component", g)
			}
			if c == "**" {
				continue
			}
			if _, err := path.Match(c, ""); err != nil {
				return merr(k, "%q is not a valid glob: %v", g, err)
			}
		}
	}
	return nil
}
