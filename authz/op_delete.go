package authz

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// opDelete removes a file (or a symlink, never followed) beneath a root:
// args {"path", "if_match"?}.
var opDelete = Op{
	Name:     api.OpDelete,
	Keys:     []string{"roots"},
	Resolve:  ResolveParent,
	Effects:  true,
	validate: []validator{validateRoots},
	// An approver sees the path; the daemon adds the file as it is now.
	show: showPath,
	decode: func(t *Tool, raw []byte, a *Args) error {
		var da api.DeleteArgs
		if err := strictArgs(raw, &da); err != nil {
			return err
		}
		a.Path, a.IfMatch = da.Path, da.IfMatch
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
		a.Path, a.IfMatch = da.Path, da.IfMatch
		return true
	},
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		return decidePath(ix, req, func(kind api.Kind, rootKey string) Decision {
			// A symlink itself may be removed; it is never followed.
			switch kind {
			case KindFile, KindSymlink:
				return allow(rootKey)
			case KindAbsent:
				return deny(api.ReasonNotFound, rootKey)
			case KindDir:
				return deny(api.ReasonNotAFile, rootKey)
			}
			return deny(api.ReasonUnsupportedFileType, rootKey)
		})
	},
	schema: pathSchema(map[string]any{
		"if_match": map[string]any{"type": "string", "description": `"sha256:<hex>" of the current content; checked when the file is removed`},
	}),
	describe: func(t *Tool) string {
		return fmt.Sprintf("Delete a file beneath %s.", strings.Join(t.Roots, ", "))
	},
}
