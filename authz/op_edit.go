package authz

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// EditArgs are an edit's args: {"path", "edits":[{"old_text",
// "new_text"}], "dry_run"?, "if_match"?}. Edits hold the texts (never in
// the ledger: their digests and lengths are); a call rebuilt from its
// record has their count only (EditCount), which is all the decision
// needs.
type EditArgs struct {
	Path      *string // nil when absent
	Edits     []api.Edit
	EditCount int
	DryRun    bool
	IfMatch   string
}

func (a *EditArgs) Subject() string { return derefOr(a.Path) }

// opEdit makes exact replacements in a file beneath a root and commits
// the result as a write does (atomically, in the held parent, only if the
// file is still what was read): args {"path", "edits", "dry_run"?,
// "if_match"?}. The ledger keeps each text's digest and length, never
// the text; an approval binds the call to its edits.
var opEdit = Op{
	Name:     api.OpEdit,
	Hints:    api.ToolHints{Destructive: true},
	Keys:     []string{"roots"},
	Targets:  pathTarget(ResolveParent, func(a *EditArgs) *string { return a.Path }),
	when:     whenPaths,
	Effects:  true,
	Binds:    true,
	validate: []validator{validateRoots},
	decode: func(t *Tool, raw []byte, a *Args) error {
		var ea api.EditArgs
		if err := strictArgs(raw, &ea); err != nil {
			return err
		}
		e := &EditArgs{Path: ea.Path, Edits: ea.Edits, EditCount: len(ea.Edits), DryRun: ea.DryRun, IfMatch: ea.IfMatch}
		a.Value = e
		switch {
		case ea.Path == nil:
			a.Invalid = "args.path: required"
		case len(ea.Edits) == 0:
			a.Invalid = "args.edits: required, at least one {old_text, new_text}"
		case ea.IfMatch != "" && !isSHA256(ea.IfMatch):
			a.Invalid = `args.if_match: "sha256:<64 hex>"`
		}
		for i, ed := range ea.Edits {
			if ed.OldText == "" && a.Invalid == "" {
				a.Invalid = fmt.Sprintf("args.edits[%d].old_text: required, not empty", i)
			}
		}
		// What an approval binds: the edits, as given (the approver is
		// shown their diff against the file).
		a.Bound = mustJSON(ea.Edits)
		// No text in the ledger: each side's digest and length.
		recEdits := make([]map[string]any, len(ea.Edits))
		for i, ed := range ea.Edits {
			recEdits[i] = map[string]any{
				"old_sha256": sha256Of([]byte(ed.OldText)), "old_len": len(ed.OldText),
				"new_sha256": sha256Of([]byte(ed.NewText)), "new_len": len(ed.NewText),
			}
		}
		rec := map[string]any{"edits": recEdits}
		if ea.Path != nil {
			rec["path"] = *ea.Path
		}
		if ea.DryRun {
			rec["dry_run"] = true
		}
		if ea.IfMatch != "" {
			rec["if_match"] = ea.IfMatch
		}
		a.Record = RecordArgs(mustJSON(rec))
		return nil
	},
	fromRecord: func(t *Tool, rec []byte, a *Args) bool {
		var ra struct {
			Path    *string           `json:"path"`
			Edits   []json.RawMessage `json:"edits"`
			DryRun  bool              `json:"dry_run"`
			IfMatch string            `json:"if_match"`
		}
		if json.Unmarshal(rec, &ra) != nil {
			return false
		}
		a.Value = &EditArgs{Path: ra.Path, EditCount: len(ra.Edits), DryRun: ra.DryRun, IfMatch: ra.IfMatch}
		return true
	},
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		ea, ok := argsOf[EditArgs](req)
		if !ok {
			return deny(api.ReasonInternalError, ix.key)
		}
		return decidePath(ix, ea.Path, req.target(0), func(kind api.Kind, rootKey string) Decision {
			// The final component is looked at, not followed, as a
			// write's: only a regular file is edited.
			switch kind {
			case KindFile:
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
		"edits": map[string]any{
			"type": "array", "minItems": 1,
			"description": "Exact replacements, applied in order: each old_text must occur exactly once in the file as the edits before it left it.",
			"items": map[string]any{
				"type": "object", "additionalProperties": false, "required": []string{"old_text", "new_text"},
				"properties": map[string]any{
					"old_text": map[string]any{"type": "string", "minLength": 1, "description": "text to replace, exactly as in the file"},
					"new_text": map[string]any{"type": "string", "description": "its replacement"},
				},
			},
		},
		"dry_run":  map[string]any{"type": "boolean", "description": "return the diff and the new sha256 without changing the file"},
		"if_match": map[string]any{"type": "string", "description": `"sha256:<hex>" of the current content; checked before the edits apply and again when they commit`},
	}),
	// An approver sees the path and how many edits; the daemon adds the
	// file as it is now and the diff the edits make of it.
	show: func(t *Tool, a OpArgs, ch *api.ApprovalChange) {
		ea, ok := a.(*EditArgs)
		if !ok {
			return
		}
		showPath(ch, ea.Path, ea.IfMatch)
		ch.Summary = append(ch.Summary, api.ChangeField{Label: "edits", Value: fmt.Sprint(ea.EditCount)})
		if ea.DryRun {
			ch.Summary = append(ch.Summary, api.ChangeField{Label: "dry_run", Value: "true"})
		}
	},
	describe: func(t *Tool) string {
		return fmt.Sprintf("Edit a file beneath %s by exact replacements (each old_text must occur exactly once); returns a unified diff and the new sha256.", strings.Join(t.Roots, ", "))
	},
}
