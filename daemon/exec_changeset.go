//go:build linux

package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/daemon/recovery"
	"github.com/sluicehq/sluice/internal/changeset"
	"github.com/sluicehq/sluice/internal/errclass"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/udiff"
	"github.com/sluicehq/sluice/sandbox"
)

// A command's writes (docs/design.md §4, "Commands that write:
// changesets"). The container writes into a scratch layer (package
// sandbox: an overlay over the tool's view, its upper layer a capped tmpfs
// that nothing on the host names); once the command has ended, what it
// changed is read from the upper layer through fds beneath it (package
// changeset) and each change is decided as the file operation it is, by
// the tool's derived writes tool (authz.Tool.WritesTool: writes.roots,
// writes.never plus the tool's never), resolved beneath those roots' fds
// exactly as a write's target is. One refusal refuses the whole
// changeset. A changeset that passes is committed (auto), parked for an
// approver (approval) or dropped (discard); a commit is a changeset
// record, durable before the first file changes, then one write, mkdir
// or delete per change, each only if the host file is still the one the
// command saw.

// writeSet is an execute tool's writes, readied at load.
type writeSet struct {
	key    string // "tools.NAME.writes"
	w      *authz.ExecWrites
	wt     *authz.Tool
	roots  []*securefs.Root // one per writes root, as wt.Roots
	mounts map[string]string
}

func (ws *writeSet) close() {
	for _, r := range ws.roots {
		if r != nil {
			r.Close()
		}
	}
	ws.roots = nil
}

// loadWrites opens the tool's writes roots beneath base (each must exist
// and lie beneath one of its directory mounts, as the kernel names both)
// and makes those mounts writable through a scratch layer.
func (e *execTool) loadWrites(key string, t *authz.Tool, base *securefs.Root, basePath string) error {
	if t.Writes == nil {
		return nil
	}
	ws := &writeSet{key: key + ".writes", w: t.Writes, wt: t.WritesTool(), mounts: map[string]string{}}
	e.writes = ws
	if ws.wt == nil {
		return fmt.Errorf("manifest: %s.writes: no derived tool (internal error)", key)
	}
	var dests []string
	for i, r := range t.Writes.Roots {
		root, err := base.OpenRootBeneath(filepath.Clean(r))
		if err != nil {
			return fmt.Errorf("manifest: %s.writes.roots[%d]: %q: %w", key, i, r, err)
		}
		ws.roots = append(ws.roots, root)
		rp, err := root.Path()
		if err != nil {
			return fmt.Errorf("manifest: %s.writes.roots[%d]: %q: %w", key, i, r, err)
		}
		found := false
		for j := range e.mounts {
			m := &e.mounts[j]
			if m.Source.Name != "" || (rp != m.Dest && !strings.HasPrefix(rp, m.Dest+"/")) {
				continue
			}
			found = true
			if _, ok := ws.mounts[m.Dest]; !ok {
				rel, err := filepath.Rel(basePath, m.Dest)
				if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
					return fmt.Errorf("manifest: %s.writes.roots[%d]: %q: its mount %s is not beneath base %s", key, i, r, m.Dest, basePath)
				}
				ws.mounts[m.Dest] = rel
				dests = append(dests, m.Dest)
				m.Writable = true // its view presents it writable to the container's uid
			}
			break
		}
		if !found {
			return fmt.Errorf("manifest: %s.writes.roots[%d]: %q is %s as the kernel names it, beneath none of %s.mounts' directories", key, i, r, rp, key)
		}
	}
	e.spec.Scratch = &sandbox.ScratchSpec{Dests: dests, MaxBytes: t.Writes.EffectiveMaxBytes(), MaxFiles: t.Writes.EffectiveMaxFiles()}
	return nil
}

// holdsRoot says whether p (relative to base) is a writes root or a
// directory above one.
func (ws *writeSet) holdsRoot(p string) bool {
	for _, r := range ws.wt.Roots {
		r = path.Clean(r)
		if p == r || p == "." || strings.HasPrefix(r, p+"/") {
			return true
		}
	}
	return false
}

// change is one path of a changeset, with what commits it.
type change struct {
	api.Change
	layer  *os.File // the upper layer it is read from; nil for a host-only deletion
	entry  string   // its path in that layer
	mode   uint32   // its mode in the layer
	isDir  bool     // a directory made or deleted
	parent *fileop.Parent
	root   int // the writes root that decided it
	// deferred: its parent is a directory this changeset makes, so it
	// was decided on its path as written (nothing there to resolve: no
	// link can be in a directory not made yet) and is resolved and
	// decided again once that directory is made (commitOne).
	deferred bool
	rel      string // relative to its root, for a deferred change
}

// csRun is a command's changeset on its way: what it changed, what was
// dropped, and whether it committed.
type csRun struct {
	ws        *writeSet
	sc        *sandbox.Scratch
	changes   []*change
	made      map[string]bool // paths of the directories it makes (allowed)
	dropped   int
	refused   *change // the first change that refused the changeset
	committed bool
}

func (r *csRun) close() {
	for _, ch := range r.changes {
		if ch.parent != nil {
			ch.parent.Close()
			ch.parent = nil
		}
	}
	if r.sc != nil {
		r.sc.Close()
		r.sc = nil
	}
}

// wireChanges is what the caller and the ledger see.
func (r *csRun) wireChanges() []api.Change {
	out := make([]api.Change, len(r.changes))
	for i, ch := range r.changes {
		out[i] = ch.Change
	}
	return out
}

// ranSlack is how far before the command's start a host change still
// counts as made while it ran: ctime comes from the kernel's coarse clock,
// which may lag the real one by a tick. Erring early only refuses a
// commit (precondition_failed); erring late would let one overwrite a
// change it never saw.
const ranSlack = 20 * time.Millisecond

// changesetAfter is what an execute call with writes does once its
// command has ended: read, decide and commit, park or drop the changeset.
// o is the command's outcome; it gains the changeset's fields, and a
// refusal or failed commit makes it not ok with the change's reason.
func (c *call) changesetAfter(et *execTool, o *outcome) *outcome {
	ws, sc := et.writes, c.scratch
	c.scratch = nil
	if ws == nil || sc == nil {
		if sc != nil {
			sc.Close()
		}
		return o
	}
	// The container is dead: let it go now (its uid, cgroups), keeping
	// only its scratch layer.
	c.releaseHeld()
	run := &csRun{ws: ws, sc: sc, made: map[string]bool{}}
	defer run.close()
	er, _ := o.result.(*execResult)
	if er == nil || o.reason != api.ReasonAllowed {
		return o // timed out, killed, cancelled: nothing is read
	}
	er.cs = run
	if ws.w.EffectiveCommitOn() != "always" && (er.exitCode == nil || *er.exitCode != 0) {
		return o // commit_on success: a failed command's writes are dropped
	}
	if err := c.readChangeset(run); err != nil {
		return c.changesetFailed(o, run, err)
	}
	if run.refused != nil {
		o.ok, o.reason = false, run.refused.Reason
		return o
	}
	if len(run.changes) == 0 {
		run.committed = true
		return o
	}
	switch ws.w.EffectiveCommit() {
	case "discard":
		return o
	case "approval":
		if r := c.awaitChangesetApproval(run); r != api.ReasonAllowed {
			o.ok, o.reason = false, r
			return o
		}
	}
	if r := c.commitChangeset(run); r != api.ReasonAllowed {
		o.ok, o.reason = false, r
	}
	return o
}

func (c *call) changesetFailed(o *outcome, run *csRun, err error) *outcome {
	var bad *changeset.BadEntryError
	if errors.As(err, &bad) {
		ch := &change{Change: api.Change{Path: bad.Path, Action: "refused", Reason: api.ReasonInvalidArgs, Rule: run.ws.key, Detail: bad.Why}}
		run.changes = append(run.changes, ch)
		run.refused = ch
		o.ok, o.reason = false, api.ReasonInvalidArgs
		return o
	}
	o.ok, o.reason = false, c.reasonOf(err, "read the changeset")
	return o
}

// readChangeset reads each writable layer and turns its entries into
// changes of paths relative to base, then decides each one.
func (c *call) readChangeset(run *csRun) error {
	ws := run.ws
	ran := c.ranAt.Add(-ranSlack).UnixNano()
	type layerEntry struct {
		e     changeset.Entry
		layer *os.File
		base  string
	}
	var all []layerEntry
	inUpper := map[string]bool{}
	for _, l := range run.sc.Layers {
		mrel, ok := ws.mounts[l.Dest]
		if !ok {
			return fmt.Errorf("changeset: a layer for %s, which is no writable mount", l.Dest)
		}
		es, err := changeset.Read(l.Upper, int(ws.w.EffectiveMaxFiles()))
		if err != nil {
			var bad *changeset.BadEntryError
			if errors.As(err, &bad) {
				bad.Path = path.Join(mrel, bad.Path)
			}
			return err
		}
		for _, e := range es {
			p := path.Join(mrel, e.Path)
			all = append(all, layerEntry{e, l.Upper, p})
			inUpper[p] = true
		}
	}
	for _, le := range all {
		e, p := le.e, le.base
		if e.Kind == changeset.Dir && ws.holdsRoot(p) {
			// A directory the copy-up of a change beneath it made in the
			// layer: a writes root or one above it, which no change may
			// remove and remake.
			if e.Opaque {
				ch := &change{Change: api.Change{Path: p, Action: "refused"}}
				c.refuse(run, ch, api.ReasonInvalidArgs, ws.key, "a writes root, or a directory above one, was removed and made again")
				run.changes = append(run.changes, ch)
			}
			continue
		}
		if !ws.w.Keeps(p) {
			run.dropped++
			continue
		}
		ch := &change{Change: api.Change{Path: p}, layer: le.layer, entry: e.Path, mode: e.Mode}
		res, cur := c.resolveChange(run, ch)
		switch e.Kind {
		case changeset.File:
			ch.Bytes, ch.SHA256 = e.Size, e.SHA256
			ch.Action = string(authz.ChangeModify)
			if cur.Kind == fileop.KindAbsent || cur.Kind == "" {
				ch.Action = string(authz.ChangeCreate)
			}
		case changeset.Dir:
			if cur.Kind == securefs.KindDir {
				if e.Opaque {
					// Remade: what the host has beneath it and the layer
					// does not is deleted.
					if err := c.deletionsBeneath(run, ch, cur, inUpper); err != nil {
						return err
					}
				}
				closeChange(ch)
				continue
			}
			ch.Action, ch.isDir = string(authz.ChangeMkdir), true
		case changeset.Whiteout:
			ch.Action = string(authz.ChangeDelete)
			if cur.Kind == securefs.KindDir {
				ch.isDir = true
				if err := c.deletionsBeneath(run, ch, cur, inUpper); err != nil {
					return err
				}
			}
		}
		c.decideChange(run, ch, res, cur, ran)
		run.changes = append(run.changes, ch)
	}
	sortChanges(run.changes)
	return nil
}

func closeChange(ch *change) {
	if ch.parent != nil {
		ch.parent.Close()
		ch.parent = nil
	}
}

// resolveChange resolves a change's parent beneath each writes root its
// path lies under, as a write's target is (resolveParent), and keeps the
// first that resolved for the commit.
func (c *call) resolveChange(run *csRun, ch *change) ([]authz.Resource, fileop.Current) {
	ws := run.ws
	var out []authz.Resource
	var cur fileop.Current
	if authz.CheckPath(ch.Path) != "" {
		return nil, cur
	}
	for _, m := range authz.MatchRoots(ws.wt, ch.Path) {
		res := authz.Resource{Root: m.Index, RootPath: m.Root}
		root := ws.roots[m.Index]
		if root == nil {
			res.Outcome = authz.OutcomeNotFound
			out = append(out, res)
			continue
		}
		pp, err := fileop.ResolveParent(root, m.Rel)
		if errors.Is(err, securefs.ErrNotExist) && run.made[path.Dir(ch.Path)] && ch.parent == nil && !ch.deferred {
			rp, perr := root.Path()
			if perr == nil {
				res.Outcome, res.Kind, res.Path, res.Rel = authz.OutcomeOK, fileop.KindAbsent, path.Join(rp, m.Rel), m.Rel
				ch.deferred, ch.root, ch.rel = true, m.Index, m.Rel
				cur = fileop.Current{Kind: fileop.KindAbsent}
				out = append(out, res)
				continue
			}
		}
		if err == nil {
			var now fileop.Current
			if now, err = pp.Stat(); err == nil {
				var abs, rel string
				if abs, rel, err = pp.Locate(); err == nil {
					res.Outcome, res.Kind, res.Path, res.Rel = authz.OutcomeOK, now.Kind, abs, rel
					res.Links = links(now.Kind, now.Nlink)
					if ch.parent == nil {
						ch.parent, ch.root, cur = pp, m.Index, now
						pp = nil
					}
				}
			}
			if pp != nil {
				pp.Close()
			}
		}
		if err != nil {
			var known bool
			res.Outcome, known = outcomeOf(err)
			if errors.Is(err, fileop.ErrBadName) {
				res.Outcome, known = authz.OutcomeInvalid, true // a name the command chose
			}
			if !known {
				c.d.log.Error("resolve a change failed", "err", err, "tool", c.req.Tool, "path", ch.Path)
			}
		}
		out = append(out, res)
	}
	return out, cur
}

// decideChange decides one change (authz.DecideChange) and, allowed,
// binds it to the host file the command saw: a file it modifies or
// deletes must not have changed since the command started (its digest is
// then what the commit requires), and a name it creates must be in a
// directory where no name came or went since.
func (c *call) decideChange(run *csRun, ch *change, res []authz.Resource, cur fileop.Current, ran int64) {
	d := authz.DecideChange(run.ws.wt, authz.ChangeAction(ch.Action), ch.Path, res)
	if !d.Allowed() {
		c.refuse(run, ch, d.Reason, d.Rule, "")
		return
	}
	if ch.deferred {
		if ch.Action == string(authz.ChangeMkdir) {
			run.made[ch.Path] = true
		}
		return // in a directory the changeset makes: decided again there
	}
	if ch.parent == nil {
		c.refuse(run, ch, api.ReasonInternalError, run.ws.key, "no parent held")
		return
	}
	if ch.Action == string(authz.ChangeMkdir) {
		run.made[ch.Path] = true
	}
	switch authz.ChangeAction(ch.Action) {
	case authz.ChangeModify, authz.ChangeDelete:
		if cur.Ctime > ran {
			c.refuse(run, ch, api.ReasonPreconditionFailed, run.ws.key, "the host file changed while the command ran")
			return
		}
		if cur.Kind == securefs.KindFile {
			sum, err := cur.SHA256Context(c.ctx)
			if err != nil {
				c.refuse(run, ch, c.reasonOf(err, "hash a changed file"), run.ws.key, "")
				return
			}
			ch.OldSHA256 = sum
			if ch.Action == string(authz.ChangeDelete) {
				ch.Bytes, ch.SHA256 = cur.Size, sum
			}
		}
	default:
		ct, err := ch.parent.DirCtime()
		if err != nil || ct > ran {
			c.refuse(run, ch, api.ReasonPreconditionFailed, run.ws.key, "its directory changed on the host while the command ran")
		}
	}
}

func (c *call) refuse(run *csRun, ch *change, reason api.Reason, rule, detail string) {
	ch.Reason, ch.Rule, ch.Detail = reason, rule, detail
	if run.refused == nil {
		run.refused = ch
	}
}

// deletionsBeneath lists, as deletions, what the host has beneath the
// directory ch names that the layer does not: everything, for a deleted
// directory; what the command did not remake, for a remade one. Every
// deletion is listed and decided, never collapsed: a never-listed file
// the command could not see refuses the changeset.
func (c *call) deletionsBeneath(run *csRun, ch *change, cur fileop.Current, inUpper map[string]bool) error {
	if ch.parent == nil {
		return nil // refused by its decision
	}
	var found []*change
	err := ch.parent.WalkNames(c.ctx, cur, int(run.ws.w.EffectiveMaxFiles()), func(rel string, kind api.Kind) error {
		p := ch.Path + "/" + rel
		if inUpper[p] && ch.Action != string(authz.ChangeDelete) {
			return nil
		}
		found = append(found, &change{Change: api.Change{Path: p, Action: string(authz.ChangeDelete)}, isDir: kind == securefs.KindDir})
		return nil
	})
	if err != nil {
		return err
	}
	ran := c.ranAt.Add(-ranSlack).UnixNano()
	for _, d := range found {
		if !run.ws.w.Keeps(d.Path) {
			run.dropped++
			continue
		}
		res, now := c.resolveChange(run, d)
		c.decideChange(run, d, res, now, ran)
		run.changes = append(run.changes, d)
	}
	return nil
}

// sortChanges puts a changeset in commit order: directories made
// (outermost first), files written, files deleted, directories deleted
// (innermost first). The approver sees it in the same order, deletions
// listed by approvalOf first.
func sortChanges(cs []*change) {
	rank := func(ch *change) int {
		switch authz.ChangeAction(ch.Action) {
		case authz.ChangeMkdir:
			return 0
		case authz.ChangeCreate, authz.ChangeModify:
			return 1
		case authz.ChangeDelete:
			if ch.isDir {
				return 3
			}
			return 2
		}
		return 4
	}
	sort.SliceStable(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		if rank(a) == 3 {
			return a.Path > b.Path // children before their directory
		}
		return a.Path < b.Path
	})
}

// commitChangeset makes the changeset's record durable, then commits each
// change in order; the first that fails stops it (the rest stay as they
// are) and its reason is the call's.
func (c *call) commitChangeset(run *csRun) api.Reason {
	if err := c.auditChangeset(run, api.VerdictAllow, api.ReasonAllowed, ""); err != nil {
		return api.ReasonAuditUnavailable
	}
	var st unix.Stat_t
	// Written files' directories are fsynced once each, after the
	// writes (fileop.WriteOptions.DeferDirSync), and before the result
	// says they committed: one sync per directory, not per file.
	unsynced := map[string]*fileop.Parent{}
	syncDirs := func() {
		for dir, pp := range unsynced {
			if err := pp.SyncDir(); err != nil {
				c.d.log.Error("changeset committed but its directory not durable", "err", err, "call_id", c.id, "dir", dir)
				for _, ch := range run.changes {
					if ch.Committed && path.Dir(ch.Path) == dir && ch.Reason == "" {
						ch.Reason = api.ReasonNotDurable
					}
				}
			}
		}
		clear(unsynced)
	}
	defer syncDirs()
	for i, ch := range run.changes {
		if authz.ChangeAction(ch.Action) == authz.ChangeDelete || authz.ChangeAction(ch.Action) == authz.ChangeMkdir {
			syncDirs() // a delete or mkdir syncs its own directory; a rename before it in another must be durable first
		}
		if err := c.stillLive(); err != nil {
			ch.Reason = c.reasonOf(err, "commit a changeset")
			return ch.Reason
		}
		root := run.ws.roots[ch.root]
		if err := unix.Fstat(int(root.Fd()), &st); err != nil {
			ch.Reason = c.reasonOf(err, "commit a changeset")
			return ch.Reason
		}
		err := c.commitOne(run, i, ch, int(st.Uid), int(st.Gid))
		if err != nil && !errors.Is(err, fileop.ErrNotDurable) {
			ch.Reason = c.reasonOf(err, "commit "+ch.Path)
			return ch.Reason
		}
		ch.Committed = true
		if err != nil {
			ch.Reason = api.ReasonNotDurable
		}
		if a := authz.ChangeAction(ch.Action); (a == authz.ChangeCreate || a == authz.ChangeModify) && ch.parent != nil {
			if _, ok := unsynced[path.Dir(ch.Path)]; !ok {
				unsynced[path.Dir(ch.Path)] = ch.parent
			}
		}
	}
	syncDirs()
	run.committed = true
	for _, ch := range run.changes {
		if ch.Reason == api.ReasonNotDurable {
			return api.ReasonNotDurable
		}
	}
	return api.ReasonAllowed
}

func (c *call) commitOne(run *csRun, i int, ch *change, uid, gid int) error {
	if ch.deferred {
		if err := c.resolveDeferred(run, ch); err != nil {
			return err
		}
	}
	pp := ch.parent
	unlock := c.d.locks.Lock(pp)
	defer unlock()
	switch authz.ChangeAction(ch.Action) {
	case authz.ChangeMkdir:
		_, err := fileop.Mkdir(pp, fileop.MkdirOptions{Perm: 0o755, UID: uid, GID: gid})
		var ex *fileop.ExistsError
		if errors.As(err, &ex) && ex.Kind == securefs.KindDir {
			return nil // made meanwhile by an earlier change or the host
		}
		return err
	case authz.ChangeCreate, authz.ChangeModify:
		content, err := readLayerFile(ch)
		if err != nil {
			return err
		}
		mode, ifMatch := fileop.Create, "absent"
		if ch.Action == string(authz.ChangeModify) {
			mode, ifMatch = fileop.Overwrite, ch.OldSHA256
		}
		perm := fs.FileMode(run.ws.wt.EffectiveFileMode())
		if ch.mode&0o111 != 0 {
			perm |= (perm & 0o444) >> 2 // an executable: x wherever file_mode gives r
		}
		_, err = fileop.Write(pp, content, fileop.WriteOptions{
			Mode: mode, Perm: perm, UID: uid, GID: gid,
			Check: func(cur fileop.Current) error {
				if err := c.stillLive(); err != nil {
					return err
				}
				return fileop.MatchIfMatchContext(c.ctx, ifMatch, cur)
			},
			TempName:     recovery.ChangesetTempName(c.id, i),
			MinFree:      c.d.cfg.MinFree,
			DeferDirSync: true, // commitChangeset syncs each directory once
		})
		return err
	case authz.ChangeDelete:
		cur, err := pp.Stat()
		if err != nil {
			return err
		}
		if cur.Kind == securefs.KindDir {
			return fileop.RemoveDir(pp)
		}
		_, err = fileop.DeleteContext(c.ctx, pp, func(cur fileop.Current) error {
			if err := c.stillLive(); err != nil {
				return err
			}
			return fileop.MatchIfMatchContext(c.ctx, ch.OldSHA256, cur)
		})
		return err
	}
	return fmt.Errorf("change %q: unknown action %q", ch.Path, ch.Action)
}

// resolveDeferred resolves a change in a directory the changeset made,
// now that it exists, beneath the root that decided it, and decides it
// again on what the kernel resolved: the same decision, or the commit
// stops with the new one's reason.
func (c *call) resolveDeferred(run *csRun, ch *change) error {
	pp, err := fileop.ResolveParent(run.ws.roots[ch.root], ch.rel)
	if err != nil {
		return err
	}
	cur, err := pp.Stat()
	if err == nil {
		var abs, rel string
		if abs, rel, err = pp.Locate(); err == nil {
			res := []authz.Resource{{Root: ch.root, RootPath: run.ws.wt.Roots[ch.root], Outcome: authz.OutcomeOK,
				Kind: cur.Kind, Path: abs, Rel: rel, Links: links(cur.Kind, cur.Nlink)}}
			if d := authz.DecideChange(run.ws.wt, authz.ChangeAction(ch.Action), ch.Path, res); !d.Allowed() {
				err = fmt.Errorf("%s, decided again in its new directory: %w", ch.Path, errclass.New(d.Reason, string(d.Reason)))
				ch.Rule = d.Rule
			}
		}
	}
	if err != nil {
		pp.Close()
		return err
	}
	ch.parent, ch.deferred = pp, false
	return nil
}

// readLayerFile reads a change's new content from its layer, through an
// fd beneath it, and checks it is what was decided.
func readLayerFile(ch *change) ([]byte, error) {
	f, err := changeset.Open(ch.layer, ch.entry)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, ch.Bytes+1))
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != ch.Bytes || "sha256:"+hex.EncodeToString(sum[:]) != ch.SHA256 {
		return nil, fmt.Errorf("%q in the scratch layer is not what was decided: %w", ch.Path, fileop.ErrChanged)
	}
	return b, nil
}

// auditChangeset appends the changeset's record and makes it durable.
func (c *call) auditChangeset(run *csRun, v api.Verdict, reason api.Reason, approvalID string) error {
	rec := &audit.Record{Kind: audit.KindChangeset, CallID: c.id, Principal: c.principalRecord(), Token: c.tokenRef(), Task: c.req.Task,
		Tool: c.req.Tool, Operation: api.OpExecute, Verdict: v, Reason: reason, Rule: run.ws.key,
		PolicyVersion: c.p.m.Version, ApprovalID: approvalID, Changes: run.wireChanges()}
	seq, err := c.d.ledger.Append(rec)
	if err == nil {
		err = c.d.ledger.Sync(seq)
	}
	if err != nil {
		c.d.log.Error("audit changeset failed; nothing commits", "err", err, "call_id", c.id)
	}
	return err
}

// changesetApproval is what an approver is shown of a parked changeset:
// the command, a count, every change (deletions first, never collapsed)
// and the unified diffs of its text files, bounded.
func (c *call) changesetApproval(run *csRun) *api.ApprovalChange {
	ch := &api.ApprovalChange{Kind: api.OpExecute}
	var argv []string
	if ea, ok := c.areq.Args.(*authz.ExecArgs); ok {
		argv = ea.Argv
	}
	if argv == nil {
		argv, _ = c.tool.OnlyCommand()
	}
	ch.Argv = argv
	n := map[string]int{}
	for _, x := range run.changes {
		n[x.Action]++
	}
	ch.Summary = []api.ChangeField{{Label: "ran", Value: authz.QuoteArgv(argv)},
		{Label: "changes", Value: fmt.Sprintf("%d deleted, %d created, %d modified, %d directories made",
			n[string(authz.ChangeDelete)], n[string(authz.ChangeCreate)], n[string(authz.ChangeModify)], n[string(authz.ChangeMkdir)])}}
	if run.dropped > 0 {
		ch.Summary = append(ch.Summary, api.ChangeField{Label: "dropped", Value: strconv.Itoa(run.dropped) + " paths keep did not choose"})
	}
	all := run.wireChanges()
	sort.SliceStable(all, func(i, j int) bool {
		return all[i].Action == string(authz.ChangeDelete) && all[j].Action != string(authz.ChangeDelete)
	})
	ch.Changes = all
	var diff strings.Builder
	for _, x := range run.changes {
		if diff.Len() >= maxApprovalDiff {
			ch.DiffTruncated = true
			break
		}
		var old, now []byte
		switch authz.ChangeAction(x.Action) {
		case authz.ChangeCreate, authz.ChangeModify:
			if x.Bytes > maxDiffInput {
				continue
			}
			b, err := readLayerFile(x)
			if err != nil || !isText(b) {
				continue
			}
			now = b
			if x.Action == string(authz.ChangeModify) {
				if old = c.hostContent(x); old == nil {
					continue
				}
			}
		default:
			continue
		}
		oldName := "a/" + x.Path
		if old == nil {
			oldName = "" // /dev/null: a new file
		}
		d, cut, _ := udiff.Unified(oldName, "b/"+x.Path, string(old), string(now))
		diff.WriteString(d)
		ch.DiffTruncated = ch.DiffTruncated || cut
	}
	d := diff.String()
	if len(d) > maxApprovalDiff {
		d, ch.DiffTruncated = d[:maxApprovalDiff], true
	}
	ch.Diff = d
	return ch
}

// maxApprovalDiff bounds the diffs a changeset's approval carries.
const maxApprovalDiff = 64 << 10

// hostContent reads the host file a change modifies, through its held
// parent, if it is still text-sized and the one decided.
func (c *call) hostContent(x *change) []byte {
	if x.parent == nil {
		return nil
	}
	b, sum, err := x.parent.ReadAll(c.ctx, maxDiffInput)
	if err != nil || sum != x.OldSHA256 || !isText(b) {
		return nil
	}
	return b
}

// awaitChangesetApproval parks a call whose command ran until an
// approver decides its changeset (approvals_after.go); the changeset's
// pending record is durable before it is listed. Allowed when approved.
func (c *call) awaitChangesetApproval(run *csRun) api.Reason {
	return c.awaitApprovalAfterRun(c.changesetApproval(run), func(id string) error {
		return c.auditChangeset(run, api.VerdictPending, api.ReasonApprovalRequired, id)
	})
}

// wire and record of a changeset, for execResult.
func (r *csRun) wire(res *api.CallResult) {
	if r == nil {
		return
	}
	res.Changes, res.Dropped = r.wireChanges(), r.dropped
	committed := r.committed
	res.Committed = &committed
}

func (r *csRun) record(rec *audit.Record) {
	if r == nil {
		return
	}
	rec.Changes = r.wireChanges()
}
