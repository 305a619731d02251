//go:build linux

package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/errclass"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/foldname"
	"github.com/sluicehq/sluice/internal/securefs"
)

// parentRef is a write's or delete's parent directory, resolved beneath a
// root, and the final name in it; rootPath is the root as the manifest
// writes it (for the temp journal).
type parentRef struct {
	p        *fileop.Parent
	root     *securefs.Root
	rootPath string
}

func (c *call) closeParents() {
	for _, pr := range c.parents {
		pr.p.Close()
	}
	c.parents = nil
}

// resolveParent resolves the parent directory beneath the root and looks
// at the final name without following it: a name that does not exist yet
// is KindAbsent (a write creates it), a symlink is KindSymlink (a write
// refuses it, a delete removes the link itself).
func (c *call) resolveParent(root *securefs.Root, m authz.RootMatch, res *authz.Resource) error {
	pp, err := fileop.ResolveParent(root, m.Rel)
	if err != nil {
		return err
	}
	if foldname.HasPrefix(pp.Name, fileop.TempPrefix) {
		// Another write's temp name: never a target.
		pp.Close()
		return fmt.Errorf("%q: %w", pp.Name, securefs.ErrInvalidPath)
	}
	cur, err := pp.Stat()
	if err != nil {
		pp.Close()
		return err
	}
	abs, rel, err := pp.Locate()
	if err != nil {
		pp.Close()
		c.d.log.Error("resolved parent not where expected; denying", "err", err, "call_tool", c.req.Tool)
		return errMisplaced
	}
	res.Outcome, res.Kind, res.Path, res.Rel = authz.OutcomeOK, cur.Kind, abs, rel
	if c.parents == nil {
		c.parents = map[int]*parentRef{}
	}
	c.parents[m.Index] = &parentRef{p: pp, root: root, rootPath: m.Root}
	return nil
}

// testHookBeforeCommit, set by tests only, runs between a write's
// decision and its commit.
var testHookBeforeCommit func(*call)

// errStaleTask: the call's task was cancelled between decision and commit.
var errStaleTask = errors.New("the task was cancelled before the write committed")

// errCancelledCall: the call was cancelled by id between decision and
// commit.
var errCancelledCall = errors.New("the call was cancelled before the write committed")

// commitCheck is what must still hold when a write or delete commits: the
// task's generation is the one the call was decided under, the call was
// not cancelled by id (a client merely gone does not stop it), and if_match
// matches the file as it is now (under the per-name lock).
func (c *call) commitCheck(cur fileop.Current) error {
	if !c.d.calls.current(c) {
		return errStaleTask
	}
	if errors.Is(context.Cause(c.ctx), errCallCancelled) {
		return errCancelledCall
	}
	return fileop.MatchIfMatchContext(c.ctx, c.ifMatch, cur)
}

func (c *call) commitOutcome(err error, op string) *outcome {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &outcome{reason: c.endReason()}
	case errors.Is(err, errStaleTask):
		return &outcome{reason: api.ReasonTaskCancelled}
	case errors.Is(err, errCancelledCall):
		return &outcome{reason: api.ReasonCancelled}
	case errors.Is(err, fileop.ErrPrecondition), errors.Is(err, fileop.ErrChanged), errors.Is(err, fileop.ErrExists),
		errors.Is(err, fileop.ErrNotRegular), errors.Is(err, securefs.ErrNotExist):
		// The file is not (any more) what the call required.
		return &outcome{reason: api.ReasonPreconditionFailed}
	}
	// Everything else by its errno, in one place: ENOSPC and EDQUOT are
	// no_space (and nothing was left behind), EMFILE busy, ….
	reason := errclass.Reason(err)
	if reason == api.ReasonInternalError {
		c.d.log.Error(op+" failed", "err", err, "call_id", c.id)
	} else {
		c.d.log.Warn(op+" failed", "err", err, "reason", reason, "call_id", c.id)
	}
	return &outcome{reason: reason}
}

// committed is the outcome of a write or delete that took effect: err is
// nil (durable) or wraps fileop.ErrNotDurable (the directory fsync after
// the commit failed). Either way the result says what happened, with its
// digest and size, and durable says whether it survives a crash.
func (c *call) committed(err error, op, digest string, size int64) *outcome {
	durable := err == nil
	o := &outcome{ok: true, reason: api.ReasonAllowed, digest: digest, size: size, durable: &durable}
	if !durable {
		c.d.log.Error(op+" committed but not durable", "err", err, "call_id", c.id)
		o.reason = api.ReasonNotDurable
	}
	return o
}

func execWrite(c *call, _ func(string, []byte)) *outcome {
	pr := c.parents[c.dec.Resource.Root]
	if pr == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	mode, err := fileop.ParseWriteMode(string(c.areq.Mode))
	if err != nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(pr.root.Fd()), &st); err != nil {
		return c.commitOutcome(err, "write")
	}
	unlock := c.d.locks.Lock(pr.p)
	defer unlock()
	if testHookBeforeCommit != nil {
		testHookBeforeCommit(c)
	}
	res, err := fileop.Write(pr.p, c.content, fileop.WriteOptions{
		Mode: mode, Perm: fs.FileMode(c.tool.EffectiveFileMode()),
		// New files belong to whoever owns the root, not to root.
		UID: int(st.Uid), GID: int(st.Gid),
		Check:      c.commitCheck,
		OnTemp:     func(dir *fileop.Parent, name string) error { return c.d.temps.add(c.p, pr.rootPath, dir, name) },
		OnTempDone: func(dir *fileop.Parent, name string) { c.d.temps.done(pr.rootPath, dir, name) },
		MinFree:    c.d.cfg.MinFree,
	})
	if err != nil && !errors.Is(err, fileop.ErrNotDurable) {
		return c.commitOutcome(err, "write")
	}
	return c.committed(err, "write", res.SHA256, res.Bytes)
}

func execDelete(c *call, _ func(string, []byte)) *outcome {
	pr := c.parents[c.dec.Resource.Root]
	if pr == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	unlock := c.d.locks.Lock(pr.p)
	defer unlock()
	res, err := fileop.DeleteContext(c.ctx, pr.p, c.commitCheck)
	if err != nil && !errors.Is(err, fileop.ErrNotDurable) {
		return c.commitOutcome(err, "delete")
	}
	return c.committed(err, "delete", res.SHA256, res.Size)
}

// tempJournal records, durably and before it exists, every temp name a
// write creates in a workspace (an overwrite links its new content to a
// temp name, then renames it over), so that a crash leaves no stray temp
// file after the next start's sweep. Lines: {"add"|"done", path from
// base}. The journal lives in the state dir.
type tempJournal struct {
	mu   sync.Mutex
	f    *os.File
	path string
}

type tempEntry struct {
	Op   string `json:"op"`
	Path string `json:"path"` // relative to base
}

func openTempJournal(stateDir string) (*tempJournal, error) {
	p := filepath.Join(stateDir, "write-temps.jsonl")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("temp journal: %w", err)
	}
	return &tempJournal{f: f, path: p}, nil
}

func tempPath(rootPath string, dir *fileop.Parent, name string) (string, error) {
	_, rel, err := dir.Locate()
	if err != nil {
		return "", err
	}
	// rel is the final name's path from the root; the temp sits beside it.
	return path.Join(rootPath, path.Dir(rel), name), nil
}

func (j *tempJournal) write(e tempEntry, sync bool) error {
	b, _ := json.Marshal(e)
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		return err
	}
	if sync {
		return unix.Fdatasync(int(j.f.Fd()))
	}
	return nil
}

// add is durable before the temp name exists: an error aborts the write.
func (j *tempJournal) add(_ *policy, rootPath string, dir *fileop.Parent, name string) error {
	p, err := tempPath(rootPath, dir, name)
	if err != nil {
		return err
	}
	return j.write(tempEntry{Op: "add", Path: p}, true)
}

func (j *tempJournal) done(rootPath string, dir *fileop.Parent, name string) {
	if p, err := tempPath(rootPath, dir, name); err == nil {
		_ = j.write(tempEntry{Op: "done", Path: p}, false)
	}
}

// sweep removes the temp names the journal says were made and not
// finished (a crash), resolving each beneath base, then empties the
// journal. A name that is gone, or is not a regular file with the temp
// prefix, is left alone.
func (j *tempJournal) sweep(base *securefs.Root) (removed int, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.Seek(0, 0); err != nil {
		return 0, err
	}
	pending := map[string]bool{}
	var order []string
	sc := bufio.NewScanner(j.f)
	for sc.Scan() {
		var e tempEntry
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue // a torn last line
		}
		switch e.Op {
		case "add":
			if !pending[e.Path] {
				order = append(order, e.Path)
			}
			pending[e.Path] = true
		case "done":
			delete(pending, e.Path)
		}
	}
	for _, p := range order {
		if !pending[p] {
			continue
		}
		pp, err := fileop.ResolveParent(base, p)
		if err != nil {
			continue
		}
		if fileop.RemoveTemp(pp, pp.Name) == nil {
			removed++
		}
		pp.Close()
	}
	if err := j.f.Truncate(0); err != nil {
		return removed, err
	}
	return removed, unix.Fdatasync(int(j.f.Fd()))
}

func (j *tempJournal) close() { j.f.Close() }
