package authz

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// DeleteArgs are a delete's args: {"path", "if_match"?}.
type DeleteArgs struct {
	Path    *string // nil when absent
	IfMatch string
}

func (a *DeleteArgs) Subject() string { return derefOr(a.Path) }

// Precondition is the if_match checked when the file is removed.
func (a *DeleteArgs) Precondition() string { return a.IfMatch }

// opDelete removes a file (or a symlink, never followed) beneath a root:
// args {"path", "if_match"?}.
var opDelete = Op{
	Name:     api.OpDelete,
	Hints:    api.ToolHints{Destructive: true},
	Keys:     []string{"roots"},
	Targets:  pathTarget(ResolveParent, func(a *DeleteArgs) *string { return a.Path }),
	when:     whenPaths,
	Effects:  true,
	validate: []validator{validateRoots},
	// An approver sees the path; the daemon adds the file as it is now.
	show: func(t *Tool, a OpArgs, ch *api.ApprovalChange) {
		if da, ok := a.(*DeleteArgs); ok {
			showPath(ch, da.Path, da.IfMatch)
		}
	},
	decode: func(t *Tool, raw []byte, a *Args) error {
		var da api.DeleteArgs
		if err := strictArgs(raw, &da); err != nil {
			return err
		}
		a.Value = &DeleteArgs{Path: da.Path, IfMatch: da.IfMatch}
		switch {
		case da.Path == nil:
			a.Invalid = "args.path: required"
		case da.IfMatch != "" && da.IfMatch != "absent" && !isSHA256(da.IfMatch):
			a.Invalid = `args.if_match: "sha256:<64 hex>"`
		}
		a.Record = RecordArgs(mustJSON(da))
		return nil
	},
	fromRecord: func(t *Tool, rec []byte, a *Args) bool {
		var da api.DeleteArgs
		if json.Unmarshal(rec, &da) != nil {
			return false
		}
		a.Value = &DeleteArgs{Path: da.Path, IfMatch: da.IfMatch}
		return true
	},
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		da, ok := argsOf[DeleteArgs](req)
		if !ok {
			return deny(api.ReasonInternalError, ix.key)
		}
		return decidePath(ix, da.Path, req.target(0), deleteKind)
	},
	schema: pathSchema(map[string]any{
		"if_match": map[string]any{"type": "string", "description": `"sha256:<hex>" of the current content; checked when the file is removed`},
	}),
	describe: func(t *Tool) string {
		return fmt.Sprintf("Delete a file beneath %s.", strings.Join(t.Roots, ", "))
	},
}

// deleteKind is a delete's check of what its final name is: a regular
// file, or a symlink itself, which may be removed (it is never followed).
func deleteKind(kind api.Kind, rootKey string) Decision {
	switch kind {
	case KindFile, KindSymlink:
		return allow(rootKey)
	case KindAbsent:
		return deny(api.ReasonNotFound, rootKey)
	case KindDir:
		return deny(api.ReasonNotAFile, rootKey)
	}
	return deny(api.ReasonUnsupportedFileType, rootKey)
}
