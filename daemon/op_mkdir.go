//go:build linux

package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/errclass"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/securefs"
)

// The daemon's half of mkdir (authz/op_mkdir.go is its pure half): one
// mkdirat in the held parent fd, or with parents each component opened or
// made beneath the root's fd one plain name at a time with no symlink
// followed (fileop.MkdirAll), at the path the decision checked. Each
// directory made gets the tool's dir_mode and the root's owner, whatever
// the daemon's umask. A mkdir leaves no temp file for recovery.

func execMkdir(c *call, _ func(string, []byte)) *outcome {
	ma, ok := c.areq.Args.(*authz.MkdirArgs)
	res := c.decidedBy(0)
	if !ok || res == nil {
		return &outcome{reason: api.ReasonInternalError}
	}
	roots := c.p.roots[c.req.Tool]
	if res.Root >= len(roots) || roots[res.Root] == nil {
		return &outcome{reason: api.ReasonNotFound}
	}
	root := roots[res.Root]
	var st unix.Stat_t
	if err := unix.Fstat(int(root.Fd()), &st); err != nil {
		return c.commitOutcome(err, "mkdir")
	}
	opts := fileop.MkdirOptions{Perm: fs.FileMode(c.tool.EffectiveDirMode()), UID: int(st.Uid), GID: int(st.Gid)}
	if err := c.stillLive(); err != nil {
		return c.commitOutcome(err, "mkdir")
	}
	var made fileop.MkdirResult
	var err error
	if pr := c.parent(0); pr != nil && !ma.Parents {
		unlock := c.d.locks.Lock(pr.p)
		err = c.checkParentAt(0, pr.p)
		if err == nil {
			made, err = fileop.Mkdir(pr.p, opts)
			if made.Created != nil {
				made.Created = []string{res.Rel}
			}
		}
		unlock()
	} else if ma.Parents {
		// res.Rel is the kernel's name of the resolved path when its
		// parent existed, else the path as requested below the root
		// (authz: missing parents): either is what never was checked on.
		made, err = fileop.MkdirAll(root, res.Rel, opts)
	} else {
		return &outcome{reason: api.ReasonInternalError}
	}
	if err != nil && !errors.Is(err, fileop.ErrNotDurable) {
		o := c.commitOutcome(mkdirErr(err), "mkdir")
		if errors.Is(err, fileop.ErrExists) {
			o.output = []byte("the name exists\n")
		}
		return o
	}
	o := c.committed(err, "mkdir", "", 0)
	created := make([]string, 0, len(made.Created))
	for _, rel := range made.Created {
		created = append(created, path.Join(res.RootPath, rel))
	}
	out, _ := json.Marshal(struct {
		Created []string `json:"created"`
	}{created})
	o.output = append(out, '\n')
	return o
}

// mkdirErr: a symlink met on the way is outside the roots (the kernel
// would have left them), a name in the way precondition_failed; the rest
// keep their reasons.
func mkdirErr(err error) error {
	switch {
	case errors.Is(err, securefs.ErrPathEscapes):
		return fmt.Errorf("%w: %w", errMkdirEscapes, err)
	case errors.Is(err, securefs.ErrNotExist):
		return fmt.Errorf("%w: %w", errMkdirGone, err)
	}
	return err
}

var (
	errMkdirEscapes = errclass.New(api.ReasonOutsideRoots, "a symlink on the way")
	errMkdirGone    = errclass.New(api.ReasonNotFound, "a directory on the way is gone")
)
