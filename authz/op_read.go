package authz

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// ReadArgs are a read's args: {"path"}.
type ReadArgs struct {
	Path *string // nil when absent
}

func (a *ReadArgs) Subject() string { return derefOr(a.Path) }

// opRead reads a file beneath a root: args {"path"}, at most max_bytes.
var opRead = Op{
	Name:     api.OpRead,
	Hints:    api.ToolHints{ReadOnly: true, Idempotent: true},
	Keys:     []string{"roots"},
	Targets:  pathTarget(ResolveExisting, func(a *ReadArgs) *string { return a.Path }),
	validate: []validator{validateRoots},
	decode: func(t *Tool, raw []byte, a *Args) error {
		p, err := decodePath(raw, a)
		a.Value = &ReadArgs{Path: p}
		return err
	},
	fromRecord: func(t *Tool, rec []byte, a *Args) bool {
		p, ok := recordedPath(rec)
		a.Value = &ReadArgs{Path: p}
		return ok
	},
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		ra, ok := argsOf[ReadArgs](req)
		if !ok {
			return deny(api.ReasonInternalError, ix.key)
		}
		return decidePath(ix, ra.Path, req.target(0), func(kind api.Kind, rootKey string) Decision {
			switch kind {
			case KindFile:
				return allow(rootKey)
			case KindDir:
				return deny(api.ReasonNotAFile, rootKey)
			}
			return deny(api.ReasonUnsupportedFileType, rootKey)
		})
	},
	schema: pathSchema(nil),
	show: func(t *Tool, a OpArgs, ch *api.ApprovalChange) {
		if ra, ok := a.(*ReadArgs); ok {
			showPath(ch, ra.Path, "")
		}
	},
	describe: func(t *Tool) string {
		return fmt.Sprintf("Read a file (up to %d bytes) beneath %s.", t.EffectiveMaxBytes(), strings.Join(t.Roots, ", "))
	},
}
