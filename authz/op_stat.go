package authz

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// StatArgs are a stat's args: {"path"}.
type StatArgs struct {
	Path *string // nil when absent
}

func (a *StatArgs) Subject() string { return derefOr(a.Path) }

// opStat says what a path is beneath a root: its type, size, mode, mtime
// and, for a regular file up to 64 MiB, its sha256. The path resolves as
// a read's does (symlinks followed while they stay beneath the root, a
// final one too): stat describes what a read of the path would open.
// Anything the kernel resolved may be described, a FIFO or a device too
// (described from fstat of the resolved fd, never opened for I/O).
var opStat = Op{
	Name:     api.OpStat,
	Hints:    api.ToolHints{ReadOnly: true, Idempotent: true},
	Keys:     []string{"roots"},
	Targets:  pathTarget(ResolveExisting, func(a *StatArgs) *string { return a.Path }),
	when:     whenPaths,
	validate: []validator{validateRoots},
	decode: func(t *Tool, raw []byte, a *Args) error {
		p, err := decodePath(raw, a)
		a.Value = &StatArgs{Path: p}
		return err
	},
	fromRecord: func(t *Tool, rec []byte, a *Args) bool {
		p, ok := recordedPath(rec)
		a.Value = &StatArgs{Path: p}
		return ok
	},
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		sa, ok := argsOf[StatArgs](req)
		if !ok {
			return deny(api.ReasonInternalError, ix.key)
		}
		return decidePath(ix, sa.Path, req.target(0), func(kind api.Kind, rootKey string) Decision {
			switch kind {
			case KindFile, KindDir, KindFIFO, KindSocket, KindDevice, KindOther:
				return allow(rootKey)
			}
			// A symlink or an absent name cannot be what a followed
			// resolution returns: fail closed.
			return deny(api.ReasonUnsupportedFileType, rootKey)
		})
	},
	schema: pathSchema(nil),
	show: func(t *Tool, a OpArgs, ch *api.ApprovalChange) {
		if sa, ok := a.(*StatArgs); ok {
			showPath(ch, sa.Path, "")
		}
	},
	describe: func(t *Tool) string {
		return fmt.Sprintf("Describe a path beneath %s: type, size, mode, mtime, and the sha256 of a regular file up to 64 MiB.", strings.Join(t.Roots, ", "))
	},
}
