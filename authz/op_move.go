package authz

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// MoveArgs are a move's args: {"path", "to", "if_match"?}.
type MoveArgs struct {
	Path    *string // the source; nil when absent
	To      *string // the destination; nil when absent
	IfMatch string
}

func (a *MoveArgs) Subject() string { return derefOr(a.Path) + " -> " + derefOr(a.To) }

// Precondition is the if_match checked on the source when it moves.
func (a *MoveArgs) Precondition() string { return a.IfMatch }

// moveTargets are a move's two targets, each a parent and a final name
// that is looked at, never followed: the source ("path") and the
// destination ("to").
var moveTargets = []Target{
	{Name: "path", Resolve: ResolveParent, of: func(a OpArgs) *string {
		if v, ok := a.(*MoveArgs); ok {
			return v.Path
		}
		return nil
	}},
	{Name: "to", Resolve: ResolveParent, of: func(a OpArgs) *string {
		if v, ok := a.(*MoveArgs); ok {
			return v.To
		}
		return nil
	}},
}

// opMove renames a file, directory or symlink beneath the roots to a name
// that does not exist (renameat2 RENAME_NOREPLACE between the two held
// parents): args {"path", "to", "if_match"?}. Both ends are checked
// against the roots and never, as requested and as resolved, so a move
// never makes a never-listed file visible under a new name nor hides a
// visible one under a never-listed name; a directory's entries are
// checked by the daemon against the same rule (MoveChangesHidden) before
// it moves.
var opMove = Op{
	Name:     api.OpMove,
	Hints:    api.ToolHints{Destructive: true},
	Keys:     []string{"roots"},
	Targets:  moveTargets,
	when:     whenPaths,
	Effects:  true,
	validate: []validator{validateRoots},
	decode: func(t *Tool, raw []byte, a *Args) error {
		var ma api.MoveArgs
		if err := strictArgs(raw, &ma); err != nil {
			return err
		}
		a.Value = &MoveArgs{Path: ma.Path, To: ma.To, IfMatch: ma.IfMatch}
		switch {
		case ma.Path == nil:
			a.Invalid = "args.path: required"
		case ma.To == nil:
			a.Invalid = "args.to: required"
		case ma.IfMatch != "" && !isSHA256(ma.IfMatch):
			a.Invalid = `args.if_match: "sha256:<64 hex>"`
		}
		a.Record = RecordArgs(mustJSON(ma))
		return nil
	},
	fromRecord: func(t *Tool, rec []byte, a *Args) bool {
		var ma api.MoveArgs
		if json.Unmarshal(rec, &ma) != nil {
			return false
		}
		a.Value = &MoveArgs{Path: ma.Path, To: ma.To, IfMatch: ma.IfMatch}
		return true
	},
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		ma, ok := argsOf[MoveArgs](req)
		if !ok {
			return deny(api.ReasonInternalError, ix.key)
		}
		// The source: a file, a directory or a symlink (which moves as
		// itself, never followed).
		src := decidePath(ix, ma.Path, req.target(0), func(kind api.Kind, rootKey string) Decision {
			switch kind {
			case KindFile, KindDir, KindSymlink:
				return allow(rootKey)
			case KindAbsent:
				return deny(api.ReasonNotFound, rootKey)
			}
			return deny(api.ReasonUnsupportedFileType, rootKey)
		})
		if !src.Allowed() {
			return src
		}
		// The destination: any name beneath a root that never hides. One
		// that exists is refused when the rename runs (never replaced:
		// precondition_failed), as a write's create mode is.
		dst := decidePath(ix, ma.To, req.target(1), func(kind api.Kind, rootKey string) Decision {
			return allow(rootKey)
		})
		targets := []*Resource{src.Resource, dst.Resource}
		if !dst.Allowed() {
			dst.Targets = targets
			return dst
		}
		src.Targets = targets
		return src
	},
	schema: func(t *Tool) map[string]any {
		s := pathSchema(map[string]any{
			"to": map[string]any{"type": "string", "description": "New path, relative to the workspace base, beneath one of: " +
				strings.Join(t.Roots, ", ") + "; it must not exist (never replaced)."},
			"if_match": map[string]any{"type": "string", "description": `"sha256:<hex>" of the source's current content; checked when it moves`},
		})(t)
		s["required"] = []string{"path", "to"}
		return s
	},
	show: func(t *Tool, a OpArgs, ch *api.ApprovalChange) {
		ma, ok := a.(*MoveArgs)
		if !ok {
			return
		}
		showPath(ch, ma.Path, "")
		if ma.To != nil {
			ch.Summary = append(ch.Summary, api.ChangeField{Label: "to", Value: *ma.To})
		}
		if ma.IfMatch != "" {
			ch.Summary = append(ch.Summary, api.ChangeField{Label: "if_match", Value: ma.IfMatch})
		}
	},
	describe: func(t *Tool) string {
		return fmt.Sprintf("Move (rename) a file or directory beneath %s to a path that does not exist yet.", strings.Join(t.Roots, ", "))
	},
}

// MoveChangesHidden reports whether an entry beneath a moved directory
// (sub, its path below the directory as the kernel names it) would be
// hidden by t's never globs at one of its paths and not at the other:
// from and to are the resolutions that decided the move's source and
// destination. Such a move is refused: hidden at the old path and not at
// the new, it would make a never-listed file visible (a directory carried
// out from under "private/**"); the other way, it would hide a visible
// one. An entry hidden at both (a ".env" carried along) stays hidden.
func MoveChangesHidden(t *Tool, from, to *Resource, sub string) bool {
	if from == nil || to == nil {
		return true // fail closed
	}
	return NeverMatchResolved(t, from.Root, joinUnder(from.Rel, sub)) != NeverMatchResolved(t, to.Root, joinUnder(to.Rel, sub))
}

func joinUnder(dir, sub string) string {
	if dir == "" || dir == "." {
		return sub
	}
	return dir + "/" + sub
}
