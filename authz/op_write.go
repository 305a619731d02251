package authz

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// Write modes (api.WriteMode), by their names in this package.
const (
	ModeCreate            = api.WriteCreate
	ModeOverwrite         = api.WriteOverwrite
	ModeCreateOrOverwrite = api.WriteCreateOrOverwrite
)

// WriteArgs are a write's args: {"path", "content"|"content_b64",
// "mode"?, "if_match"?}. Content is the body (never in the ledger);
// ContentBytes its length, what the decision sees (as replay does: the
// ledger keeps only the length).
type WriteArgs struct {
	Path         *string // nil when absent
	Mode         api.WriteMode
	Content      []byte
	ContentBytes int64
	IfMatch      string
}

func (a *WriteArgs) Subject() string { return derefOr(a.Path) }

// Precondition is the if_match checked when the write commits.
func (a *WriteArgs) Precondition() string { return a.IfMatch }

// opWrite writes a file beneath a root, atomically: args {"path",
// "content"|"content_b64", "mode"?, "if_match"?}; the ledger keeps the
// content's digest and length, never the body.
var opWrite = Op{
	Name:     api.OpWrite,
	Hints:    api.ToolHints{Destructive: true},
	Keys:     []string{"roots", "mode", "file_mode"},
	Targets:  pathTarget(ResolveParent, func(a *WriteArgs) *string { return a.Path }),
	when:     whenPaths,
	Effects:  true,
	Binds:    true,
	validate: []validator{validateRoots, validateWriteMode},
	decode: func(t *Tool, raw []byte, a *Args) error {
		var wa api.WriteArgs
		if err := strictArgs(raw, &wa); err != nil {
			return err
		}
		w := &WriteArgs{Path: wa.Path, IfMatch: wa.IfMatch}
		a.Value = w
		// An omitted mode is the tool's own (create_or_overwrite by default).
		w.Mode = writeMode(t, wa.Mode)
		switch {
		case wa.Path == nil:
			a.Invalid = "args.path: required"
		case wa.Content != nil && wa.ContentB64 != nil:
			a.Invalid = "args: give content or content_b64, not both"
		case wa.Content == nil && wa.ContentB64 == nil:
			a.Invalid = "args.content: required (or content_b64)"
		case wa.IfMatch != "" && wa.IfMatch != "absent" && !isSHA256(wa.IfMatch):
			a.Invalid = `args.if_match: "sha256:<64 hex>" or "absent"`
		case wa.Mode != "" && wa.Mode != ModeCreate && wa.Mode != ModeOverwrite && wa.Mode != ModeCreateOrOverwrite:
			a.Invalid = "args.mode: create, overwrite or create_or_overwrite"
		}
		if wa.Content != nil {
			w.Content = []byte(*wa.Content)
		} else if wa.ContentB64 != nil {
			b, err := base64.StdEncoding.DecodeString(*wa.ContentB64)
			if err != nil && a.Invalid == "" {
				a.Invalid = "args.content_b64: not valid base64"
			}
			w.Content = b
		}
		w.ContentBytes = int64(len(w.Content))
		a.Bound = w.Content
		// No file body in the ledger: its digest and length only.
		rec := map[string]any{"content_sha256": sha256Of(w.Content), "content_len": len(w.Content), "mode": w.Mode}
		if wa.Path != nil {
			rec["path"] = *wa.Path
		}
		if wa.IfMatch != "" {
			rec["if_match"] = wa.IfMatch
		}
		a.Record = RecordArgs(mustJSON(rec))
		return nil
	},
	fromRecord: func(t *Tool, rec []byte, a *Args) bool {
		var ra struct {
			Path       *string       `json:"path"`
			Mode       api.WriteMode `json:"mode"`
			ContentLen *int64        `json:"content_len"`
			IfMatch    string        `json:"if_match"`
		}
		if json.Unmarshal(rec, &ra) != nil {
			return false
		}
		w := &WriteArgs{Path: ra.Path, IfMatch: ra.IfMatch, Mode: writeMode(t, ra.Mode)}
		if ra.ContentLen != nil {
			w.ContentBytes = *ra.ContentLen
		}
		a.Value = w
		return true
	},
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		wa, ok := argsOf[WriteArgs](req)
		if !ok {
			return deny(api.ReasonInternalError, ix.key)
		}
		if !t.AllowsWriteMode(wa.Mode) {
			return deny(api.ReasonInvalidArgs, ix.key+".mode")
		}
		if wa.ContentBytes > t.EffectiveMaxBytes() {
			return deny(api.ReasonLimitExceeded, ix.key+".max_bytes")
		}
		return decidePath(ix, wa.Path, req.target(0), writeKind)
	},
	schema: pathSchema(map[string]any{
		"content":     map[string]any{"type": "string", "description": "UTF-8 content"},
		"content_b64": map[string]any{"type": "string", "description": "base64 content, instead of content"},
		"mode": map[string]any{"type": "string", "enum": []api.WriteMode{ModeCreate, ModeOverwrite, ModeCreateOrOverwrite},
			"description": "create (the file must not exist), overwrite (it must), or create_or_overwrite (default)"},
		"if_match": map[string]any{"type": "string", "description": `"sha256:<hex>" of the current content, or "absent"; checked when the write commits`},
	}),
	// An approver sees the path, the mode and the new content's size and
	// digest (what the approval binds); the daemon adds the file as it is
	// now and a diff.
	show: func(t *Tool, a OpArgs, ch *api.ApprovalChange) {
		wa, ok := a.(*WriteArgs)
		if !ok {
			return
		}
		showPath(ch, wa.Path, wa.IfMatch)
		ch.Summary = append(ch.Summary, api.ChangeField{Label: "mode", Value: string(wa.Mode)})
		ch.New = &api.FileState{Size: int64(len(wa.Content)), SHA256: sha256Of(wa.Content)}
	},
	describe: func(t *Tool) string {
		return fmt.Sprintf("Write a file beneath %s (atomically; returns its new sha256 for the next if_match).", strings.Join(t.Roots, ", "))
	},
}

// writeKind is a write's check of what its final name is now: a regular
// file or nothing. The final component is looked at, not followed: a
// symlink there is refused and what it points to stays untouched.
func writeKind(kind api.Kind, rootKey string) Decision {
	switch kind {
	case KindFile, KindAbsent:
		return allow(rootKey)
	case KindDir:
		return deny(api.ReasonNotAFile, rootKey)
	}
	return deny(api.ReasonUnsupportedFileType, rootKey)
}

// writeMode is a call's write mode: as given, else the tool's, else
// create_or_overwrite.
func writeMode(t *Tool, given api.WriteMode) api.WriteMode {
	switch {
	case given != "":
		return given
	case t != nil && t.Mode != "":
		return t.Mode
	}
	return ModeCreateOrOverwrite
}

func validateWriteMode(key string, t *Tool) error {
	switch t.Mode {
	case "", ModeCreate, ModeOverwrite, ModeCreateOrOverwrite:
	default:
		return merr(key+".mode", "is %q; use create, overwrite or create_or_overwrite (the default)", t.Mode)
	}
	if t.FileMode != "" {
		if _, err := ParseFileMode(t.FileMode); err != nil {
			return merr(key+".file_mode", "%q %v", t.FileMode, err)
		}
	}
	return nil
}

// ParseFileMode reads an octal permission such as "0644" or "640": no
// set-id or sticky bits, and the owner may read and write.
func ParseFileMode(s string) (uint32, error) {
	if s == "" || len(s) > 4 {
		return 0, errors.New("is not an octal mode such as \"0644\"")
	}
	var m uint32
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, errors.New("is not an octal mode such as \"0644\"")
		}
		m = m<<3 | uint32(c-'0')
	}
	if m&^0o777 != 0 {
		return 0, errors.New("sets set-id or sticky bits; use permission bits only")
	}
	if m&0o600 != 0o600 {
		return 0, errors.New("must let the owner read and write (0600 at least)")
	}
	return m, nil
}

// EffectiveFileMode is file_mode with its default applied.
func (t *Tool) EffectiveFileMode() uint32 {
	if m, err := ParseFileMode(t.FileMode); err == nil {
		return m
	}
	return DefaultFileMode
}

// EffectiveApprovalTimeoutMS is approval_timeout_ms with its default.
func (t *Tool) EffectiveApprovalTimeoutMS() int64 {
	if t.ApprovalTimeoutMS > 0 {
		return t.ApprovalTimeoutMS
	}
	return DefaultApprovalTimeoutMS
}

// AllowsWriteMode says whether a call's write mode is one the tool allows.
func (t *Tool) AllowsWriteMode(mode api.WriteMode) bool {
	switch t.Mode {
	case "", ModeCreateOrOverwrite:
		return true
	}
	return mode == t.Mode
}
