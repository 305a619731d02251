package authz

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// ListArgs are a list's args: {"path"}.
type ListArgs struct {
	Path *string // nil when absent
}

func (a *ListArgs) Subject() string { return derefOr(a.Path) }

// opList lists a directory beneath a root: args {"path"}.
var opList = Op{
	Name:     api.OpList,
	Hints:    api.ToolHints{ReadOnly: true, Idempotent: true},
	Keys:     []string{"roots"},
	Targets:  pathTarget(ResolveExisting, func(a *ListArgs) *string { return a.Path }),
	validate: []validator{validateRoots},
	decode: func(t *Tool, raw []byte, a *Args) error {
		p, err := decodePath(raw, a)
		a.Value = &ListArgs{Path: p}
		return err
	},
	fromRecord: func(t *Tool, rec []byte, a *Args) bool {
		p, ok := recordedPath(rec)
		a.Value = &ListArgs{Path: p}
		return ok
	},
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		la, ok := argsOf[ListArgs](req)
		if !ok {
			return deny(api.ReasonInternalError, ix.key)
		}
		return decidePath(ix, la.Path, req.target(0), func(kind api.Kind, rootKey string) Decision {
			if kind == KindDir {
				return allow(rootKey)
			}
			return deny(api.ReasonNotADirectory, rootKey)
		})
	},
	schema: pathSchema(nil),
	show: func(t *Tool, a OpArgs, ch *api.ApprovalChange) {
		if la, ok := a.(*ListArgs); ok {
			showPath(ch, la.Path, "")
		}
	},
	describe: func(t *Tool) string {
		return fmt.Sprintf("List a directory beneath %s: one JSON object per entry.", strings.Join(t.Roots, ", "))
	},
}
