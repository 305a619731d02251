package authz

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// MaxListDepth bounds a list's depth: each level holds one directory fd
// while its entries are listed.
const MaxListDepth = 16

// ListArgs are a list's args: {"path", "depth"?, "sizes"?}.
type ListArgs struct {
	Path *string // nil when absent
	// Depth is how many levels are listed: 1 (the default) the directory's
	// own entries, 2 also its subdirectories' (as children), and so on.
	Depth int
	// Sizes: a directory's size is the total of the regular files
	// beneath it at any depth that a listing would show: never-listed
	// names, and all beneath a never-listed directory, count for nothing
	// (a total must not tell what a hidden file holds); symlinks are not
	// followed.
	Sizes bool
}

func (a *ListArgs) Subject() string { return derefOr(a.Path) }

func listArgs(la *api.ListArgs) (*ListArgs, string) {
	v := &ListArgs{Path: la.Path, Depth: 1, Sizes: la.Sizes}
	switch {
	case la.Path == nil:
		return v, "args.path: required"
	case la.Depth != nil && (*la.Depth < 1 || *la.Depth > MaxListDepth):
		return v, fmt.Sprintf("args.depth: from 1 to %d", MaxListDepth)
	case la.Depth != nil:
		v.Depth = *la.Depth
	}
	return v, ""
}

// opList lists a directory beneath a root: args {"path", "depth"?,
// "sizes"?}.
var opList = Op{
	Name:     api.OpList,
	Hints:    api.ToolHints{ReadOnly: true, Idempotent: true},
	Keys:     []string{"roots"},
	Targets:  pathTarget(ResolveExisting, func(a *ListArgs) *string { return a.Path }),
	when:     whenPaths,
	validate: []validator{validateRoots},
	decode: func(t *Tool, raw []byte, a *Args) error {
		var la api.ListArgs
		if err := strictArgs(raw, &la); err != nil {
			return err
		}
		a.Value, a.Invalid = listArgs(&la)
		a.Record = RecordArgs(mustJSON(la))
		return nil
	},
	fromRecord: func(t *Tool, rec []byte, a *Args) bool {
		var la api.ListArgs
		if json.Unmarshal(rec, &la) != nil {
			return false
		}
		a.Value, _ = listArgs(&la)
		return true
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
	schema: pathSchema(map[string]any{
		"depth": map[string]any{"type": "integer", "minimum": 1, "maximum": MaxListDepth, "description": "Levels to list: 1 (the default) the directory's entries; more nests each subdirectory's entries as its children."},
		"sizes": map[string]any{"type": "boolean", "description": "Give each directory the total size of the files beneath it (at any depth; hidden files not counted)."},
	}),
	show: func(t *Tool, a OpArgs, ch *api.ApprovalChange) {
		if la, ok := a.(*ListArgs); ok {
			showPath(ch, la.Path, "")
			if la.Depth > 1 {
				ch.Summary = append(ch.Summary, api.ChangeField{Label: "depth", Value: fmt.Sprint(la.Depth)})
			}
		}
	},
	describe: func(t *Tool) string {
		return fmt.Sprintf("List a directory beneath %s: one JSON object per entry; with depth, subdirectories' entries as children.", strings.Join(t.Roots, ", "))
	},
}
