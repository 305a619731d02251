package authz

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// ExecWrites is an execute tool's "writes" key (DESIGN §4, "Commands
// that write: changesets"): the directories beneath its mounts its
// commands see writable. What a command writes lands in a scratch layer
// sluiced owns; when it ends, what it changed is read as a changeset,
// and each change is decided by DecideChange as the matching file
// operation of the tool's WritesTool, before anything reaches the host.
type ExecWrites struct {
	// Roots are directories relative to base, each beneath (or equal
	// to) one of the tool's mounts: the only places a change may be.
	Roots []string `json:"roots,omitempty" toml:"roots"`
	// Never are globs no change may touch, beside the tool's own never.
	Never []string `json:"never,omitempty" toml:"never"`
	// Commit is what becomes of an allowed changeset: "approval" (the
	// default: a human approves it after the command ran), "auto", or
	// "discard" (nothing is kept; a writable sandbox).
	Commit string `json:"commit,omitempty" toml:"commit"`
	// Keep are globs, matched against paths relative to base as never
	// globs are, that choose what is committed; empty: everything.
	Keep []string `json:"keep,omitempty" toml:"keep"`
	// MaxFiles caps the changes of one changeset (DefaultWritesMaxFiles).
	MaxFiles int64 `json:"max_files,omitempty" toml:"max_files"`
	// MaxBytes caps the scratch layer (DefaultWritesMaxBytes).
	MaxBytes int64 `json:"max_bytes,omitempty" toml:"max_bytes"`
	// CommitOn is when the changeset is read: "success" (the default:
	// exit 0) or "always".
	CommitOn string `json:"commit_on,omitempty" toml:"commit_on"`

	keep []glob // Keep compiled by Parse
}

// Values of writes.commit and writes.commit_on.
const (
	CommitApproval  = "approval"
	CommitAuto      = "auto"
	CommitDiscard   = "discard"
	CommitOnSuccess = "success"
	CommitOnAlways  = "always"
)

// Defaults and bounds of writes and cache.
const (
	DefaultWritesMaxFiles = 20000
	DefaultWritesMaxBytes = 256 << 20
	DefaultCacheMB        = 1024
	maxWritesMaxFiles     = 1_000_000
	maxWritesMaxBytes     = 1 << 40
	maxCacheMB            = 1 << 20
)

// EffectiveCommit is commit with its default ("approval") applied.
func (w *ExecWrites) EffectiveCommit() string {
	if w == nil || w.Commit == "" {
		return CommitApproval
	}
	return w.Commit
}

// EffectiveCommitOn is commit_on with its default ("success") applied.
func (w *ExecWrites) EffectiveCommitOn() string {
	if w == nil || w.CommitOn == "" {
		return CommitOnSuccess
	}
	return w.CommitOn
}

// EffectiveMaxFiles is max_files with its default applied.
func (w *ExecWrites) EffectiveMaxFiles() int64 {
	if w == nil || w.MaxFiles == 0 {
		return DefaultWritesMaxFiles
	}
	return w.MaxFiles
}

// EffectiveMaxBytes is max_bytes (the scratch layer's cap) with its
// default applied.
func (w *ExecWrites) EffectiveMaxBytes() int64 {
	if w == nil || w.MaxBytes == 0 {
		return DefaultWritesMaxBytes
	}
	return w.MaxBytes
}

// EffectiveCacheMB is cache_mb with its default applied.
func (t *Tool) EffectiveCacheMB() int64 {
	if t.CacheMB == 0 {
		return DefaultCacheMB
	}
	return t.CacheMB
}

// Keeps reports whether a change at rel (relative to base) is committed:
// keep is empty, or one of its globs matches rel as a never glob matches
// (a glob without '/' any component's name, one with '/' the path,
// every ancestor included, names folded). What is not kept is discarded
// and counted, never committed.
func (w *ExecWrites) Keeps(rel string) bool {
	if w == nil || len(w.Keep) == 0 {
		return true
	}
	globs := w.keep
	if globs == nil { // built by hand, not by Parse
		for _, g := range w.Keep {
			globs = append(globs, compileGlob(g))
		}
	}
	_, hit := neverMatch(globs, rel)
	return hit
}

// WritesTool is the write tool a changeset of t is decided as: nil when
// t has no writes. Built once at Parse and never in Manifest.Tools, it
// is a write tool whose roots are writes.roots, whose never is
// writes.never followed by the tool's never, with the tool's hard_links,
// and whose rules are named tools.NAME.writes (.roots[i],
// .never[i]; the tool's own never keeps its key tools.NAME.never[j]).
// MatchRoots, NeverMatch and NeverMatchResolved work on it as on any
// file tool; its max_bytes is writes' scratch cap (no file of a
// changeset is larger).
func (t *Tool) WritesTool() *Tool {
	if t.wt != nil || t.Writes == nil {
		return t.wt
	}
	return buildWritesTool("?", t) // a tool built by hand
}

// prepareWrites compiles, at Parse, what t's writes decide with: its
// WritesTool and its keep globs.
func prepareWrites(name string, t *Tool) {
	if t.Writes == nil {
		return
	}
	t.wt = buildWritesTool(name, t)
	for _, g := range t.Writes.Keep {
		t.Writes.keep = append(t.Writes.keep, compileGlob(g))
	}
}

// buildWritesTool is t's WritesTool, with its index; nil without writes.
func buildWritesTool(name string, t *Tool) *Tool {
	w := t.Writes
	if w == nil {
		return nil
	}
	wt := &Tool{
		Operation:   api.OpWrite,
		Description: "the writes of tools." + name,
		Roots:       append([]string(nil), w.Roots...),
		Never:       append(append([]string(nil), w.Never...), t.Never...),
		MaxBytes:    w.EffectiveMaxBytes(),
		HardLinks:   t.HardLinks,
	}
	ix := buildIndex(name+".writes", wt)
	for j := range t.Never {
		ix.neverKeys[len(w.Never)+j] = fmt.Sprintf("tools.%s.never[%d]", name, j)
	}
	ix.linksKey = "tools." + name + ".hard_links"
	wt.idx = ix
	return wt
}

// ChangeAction is what one change of a changeset does to its path.
type ChangeAction string

// Change actions, as the scratch layer shows them.
const (
	ChangeCreate ChangeAction = "create" // a regular file the host does not have
	ChangeModify ChangeAction = "modify" // new content for a regular file the host has
	ChangeDelete ChangeAction = "delete" // a whiteout: a regular file or a directory removed
	ChangeMkdir  ChangeAction = "mkdir"  // a directory made
)

// DecideChange decides one change of a changeset: whether wt (a tool's
// WritesTool) may make it. path is relative to base, as a file tool's
// path is; resolved is what the daemon's parent resolution of path gave
// beneath each of wt's roots it lies under (one per RootMatch, in order,
// exactly as a write's target is resolved: Outcome, Kind, Rel, Links).
// It applies what a write applies (the lexical checks, the roots,
// never on the path as requested and as resolved, hard links) and then
// the action's check of what the host has there now:
//
//	create  nothing (a regular file there now: precondition_failed; else as a write)
//	modify  a regular file (nothing there now: precondition_failed; else as a write)
//	delete  a regular file or a directory (nothing: precondition_failed; a symlink: unsupported_file_type; else as a delete)
//	mkdir   nothing or a directory (else as a mkdir: not_a_directory)
//
// Only regular files and directories change: a symlink, FIFO, socket or
// device in the way is unsupported_file_type, and what a symlink points
// to is never looked at. A mismatch of existence means the host is not
// what the command saw. Rules are tools.NAME.writes.… as WritesTool
// names them; the tool's approval is not applied (writes.commit says
// what follows an allowed changeset). Pure: no syscalls, so replay
// re-decides a changeset from its record.
func DecideChange(wt *Tool, action ChangeAction, path string, resolved []Resource) Decision {
	if wt == nil {
		return deny(api.ReasonInternalError, "")
	}
	ix := wt.index()
	var kind func(api.Kind, string) Decision
	switch action {
	case ChangeCreate:
		kind = createKind
	case ChangeModify:
		kind = modifyKind
	case ChangeDelete:
		kind = deleteChangeKind
	case ChangeMkdir:
		kind = mkdirKind
	default:
		return deny(api.ReasonInternalError, ix.key)
	}
	return decidePath(ix, &path, resolved, kind)
}

// createKind: a created file must not exist on the host now.
func createKind(kind api.Kind, rootKey string) Decision {
	if kind == KindFile {
		return deny(api.ReasonPreconditionFailed, rootKey)
	}
	return writeKind(kind, rootKey)
}

// modifyKind: a modified file must still be a regular file on the host.
func modifyKind(kind api.Kind, rootKey string) Decision {
	if kind == KindAbsent {
		return deny(api.ReasonPreconditionFailed, rootKey)
	}
	return writeKind(kind, rootKey)
}

// deleteChangeKind: a deletion removes a regular file or a directory; a
// delete tool's symlink removal is not a change a command may make.
func deleteChangeKind(kind api.Kind, rootKey string) Decision {
	switch kind {
	case KindDir:
		return allow(rootKey)
	case KindAbsent:
		return deny(api.ReasonPreconditionFailed, rootKey)
	case KindSymlink:
		return deny(api.ReasonUnsupportedFileType, rootKey)
	}
	return deleteKind(kind, rootKey)
}

// validateWrites checks writes: roots beneath the tool's mounts (the
// daemon checks them again with the kernel at load), globs, and values.
func validateWrites(key string, t *Tool) error {
	w := t.Writes
	if w == nil {
		return nil
	}
	k := key + ".writes"
	if len(w.Roots) == 0 {
		return merr(k+".roots", "missing or empty; list the directories (relative to base, beneath mounts) the command may change, e.g. [\"workspace/src\"]")
	}
	for i, r := range w.Roots {
		rk := fmt.Sprintf("%s.roots[%d]", k, i)
		if err := validateRel(r); err != nil {
			return merr(rk, "%q %v", r, err)
		}
		if c := path.Clean(r); c != r {
			return merr(rk, "%q is not clean; write it %q", r, c)
		}
		if !beneathMount(r, t.Mounts) {
			return merr(rk, "%q lies beneath none of mounts; a command changes only what it sees: add it, or a directory above it, to mounts", r)
		}
	}
	for i, g := range w.Never {
		if err := validateGlob(g); err != nil {
			return merr(fmt.Sprintf("%s.never[%d]", k, i), "%q: %v", g, err)
		}
	}
	for i, g := range w.Keep {
		gk := fmt.Sprintf("%s.keep[%d]", k, i)
		if strings.HasPrefix(g, "/") {
			return merr(gk, "%q is absolute; keep globs match paths relative to base", g)
		}
		if err := validateGlob(g); err != nil {
			return merr(gk, "%q: %v", g, err)
		}
	}
	switch w.Commit {
	case "", CommitApproval, CommitAuto, CommitDiscard:
	default:
		return merr(k+".commit", "is %q; use \"approval\" (the default), \"auto\" or \"discard\"", w.Commit)
	}
	switch w.CommitOn {
	case "", CommitOnSuccess, CommitOnAlways:
	default:
		return merr(k+".commit_on", "is %q; use \"success\" (the default: exit 0) or \"always\"", w.CommitOn)
	}
	if w.Commit == CommitDiscard {
		if len(w.Keep) > 0 {
			return merr(k+".keep", "applies only when something is committed; with commit \"discard\" nothing is: remove it")
		}
		if w.CommitOn != "" {
			return merr(k+".commit_on", "applies only when something is committed; with commit \"discard\" nothing is: remove it")
		}
	}
	if w.MaxFiles < 0 || w.MaxFiles > maxWritesMaxFiles {
		return merr(k+".max_files", "is %d; use 1 to %d changes a changeset may hold (default %d)", w.MaxFiles, maxWritesMaxFiles, DefaultWritesMaxFiles)
	}
	if w.MaxBytes < 0 || w.MaxBytes > maxWritesMaxBytes {
		return merr(k+".max_bytes", "is %d; use 1 to %d bytes the scratch layer may hold (default %d)", w.MaxBytes, int64(maxWritesMaxBytes), DefaultWritesMaxBytes)
	}
	return nil
}

// beneathMount reports whether rel (clean, relative to base) lies
// beneath or at one of mounts, compared by components as written.
func beneathMount(rel string, mounts []string) bool {
	rc := splitPath(rel, nil)
	for _, m := range mounts {
		mc := splitPath(path.Clean(m), nil)
		if len(mc) <= len(rc) && equalPrefix(mc, rc) {
			return true
		}
	}
	return false
}

// validateCache checks cache's container paths and cache_mb; where the
// tool's mounts lie is known once base is (checkCacheMounts).
func validateCache(key string, t *Tool) error {
	for i, c := range t.Cache {
		ck := fmt.Sprintf("%s.cache[%d]", key, i)
		switch {
		case c == "" || strings.ContainsRune(c, 0) || len(c) > MaxPathBytes:
			return merr(ck, "%q is empty, too long or contains NUL; name a directory inside the container, such as \"/root/.cache\"", c)
		case !path.IsAbs(c):
			return merr(ck, "%q is not absolute; name the directory inside the container, such as \"/root/.cache\"", c)
		case path.Clean(c) != c:
			return merr(ck, "%q is not clean; write it %q", c, path.Clean(c))
		case c == "/":
			return merr(ck, "is /; name a directory beneath it, such as \"/root/.cache\"")
		}
		for _, r := range api.ReservedContainerPaths {
			if pathWithin(c, r) {
				return merr(ck, "%q lies under %s, which sluice mounts itself", c, r)
			}
		}
		if c == api.ContainerTmp {
			// Beneath it is fine (HOME is /tmp: ~/.cache/go-build is
			// /tmp/.cache/go-build), bound over the call's own tmpfs.
			return merr(ck, "is %s, a tmpfs of each call's own; name a directory beneath it, such as \"/tmp/.cache/go-build\" (HOME is /tmp)", api.ContainerTmp)
		}
		for j, o := range t.Cache[:i] {
			if pathWithin(c, o) || pathWithin(o, c) {
				return merr(ck, "%q overlaps cache[%d] %q; give each cache a directory of its own", c, j, o)
			}
		}
	}
	if t.CacheMB < 0 || t.CacheMB > maxCacheMB {
		return merr(key+".cache_mb", "is %d; use 1 to %d MiB (default %d)", t.CacheMB, maxCacheMB, DefaultCacheMB)
	}
	if t.CacheMB != 0 && len(t.Cache) == 0 {
		return merr(key+".cache_mb", "applies only with cache; remove it or add cache")
	}
	return nil
}

// checkCacheMounts refuses a cache path that overlaps a mount's path in
// the container (the mount's host path, base joined with it, as the
// manifest writes it; the daemon checks the kernel's name at load): a
// cache there would hide the mount, or be hidden by it.
func checkCacheMounts(m *Manifest) error {
	for _, name := range sortedKeys(m.Tools) {
		t := m.Tools[name]
		for i, c := range t.Cache {
			for j, mnt := range t.Mounts {
				dest := filepath.Join(m.BaseDir, mnt)
				if pathWithin(c, dest) || pathWithin(dest, c) {
					return merr(fmt.Sprintf("tools.%s.cache[%d]", name, i),
						"%q overlaps mounts[%d] %q (%s in the container); a cache may not lie on or above a mount", c, j, mnt, dest)
				}
			}
		}
	}
	return nil
}

// pathWithin reports whether the clean absolute path p is dir or lies
// beneath it.
func pathWithin(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
