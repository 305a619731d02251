package authz

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// ReadArgs are a read's args: {"path", "offset"?, "limit"?, "tail"?}.
// Offset (from 1) and Limit select lines, Tail the last lines; none of
// them: the file from its start, up to max_bytes. They choose what is
// returned, not whether: the decision is the path's.
type ReadArgs struct {
	Path   *string // nil when absent
	Offset int64   // 0: not given (the first line)
	Limit  int64   // 0: no line limit
	Tail   int64   // 0: not a tail read
}

func (a *ReadArgs) Subject() string { return derefOr(a.Path) }

// Ranged says whether the read selects lines (offset, limit or tail)
// rather than the file's bytes from its start.
func (a *ReadArgs) Ranged() bool { return a.Offset > 0 || a.Limit > 0 || a.Tail > 0 }

// readArgs is the typed form of api.ReadArgs, and why it breaks a rule
// ("" when it does not).
func readArgs(ra *api.ReadArgs) (*ReadArgs, string) {
	v := &ReadArgs{Path: ra.Path}
	pos := func(name string, p *int64, to *int64) string {
		if p == nil {
			return ""
		}
		if *p < 1 {
			return "args." + name + ": must be at least 1"
		}
		*to = *p
		return ""
	}
	var invalid string
	for _, f := range []struct {
		name string
		p    *int64
		to   *int64
	}{{"offset", ra.Offset, &v.Offset}, {"limit", ra.Limit, &v.Limit}, {"tail", ra.Tail, &v.Tail}} {
		if msg := pos(f.name, f.p, f.to); msg != "" && invalid == "" {
			invalid = msg
		}
	}
	switch {
	case ra.Path == nil:
		invalid = "args.path: required"
	case invalid == "" && ra.Tail != nil && (ra.Offset != nil || ra.Limit != nil):
		invalid = "args.tail: excludes offset and limit"
	}
	return v, invalid
}

// opRead reads a file beneath a root: args {"path", "offset"?, "limit"?,
// "tail"?}, at most max_bytes.
var opRead = Op{
	Name:     api.OpRead,
	Hints:    api.ToolHints{ReadOnly: true, Idempotent: true},
	Keys:     []string{"roots"},
	Targets:  pathTarget(ResolveExisting, func(a *ReadArgs) *string { return a.Path }),
	when:     whenPaths,
	validate: []validator{validateRoots},
	decode: func(t *Tool, raw []byte, a *Args) error {
		var ra api.ReadArgs
		if err := strictArgs(raw, &ra); err != nil {
			return err
		}
		a.Value, a.Invalid = readArgs(&ra)
		a.Record = RecordArgs(mustJSON(ra))
		return nil
	},
	fromRecord: func(t *Tool, rec []byte, a *Args) bool {
		var ra api.ReadArgs
		if json.Unmarshal(rec, &ra) != nil {
			return false
		}
		a.Value, _ = readArgs(&ra) // the record's detail says why it was invalid
		return true
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
	schema: pathSchema(map[string]any{
		"offset": map[string]any{"type": "integer", "minimum": 1, "description": "First line to return (1 is the first line of the file)."},
		"limit":  map[string]any{"type": "integer", "minimum": 1, "description": "Most lines to return."},
		"tail":   map[string]any{"type": "integer", "minimum": 1, "description": "Return the last lines instead (not with offset or limit)."},
	}),
	show: func(t *Tool, a OpArgs, ch *api.ApprovalChange) {
		if ra, ok := a.(*ReadArgs); ok {
			showPath(ch, ra.Path, "")
			if ra.Ranged() {
				ch.Summary = append(ch.Summary, api.ChangeField{Label: "lines", Value: ra.lines()})
			}
		}
	},
	describe: func(t *Tool) string {
		return fmt.Sprintf("Read a file (up to %d bytes), or a range of its lines, beneath %s. The result gives the file's size, and next_offset when more lines follow.", t.EffectiveMaxBytes(), strings.Join(t.Roots, ", "))
	},
}

// lines says which lines a ranged read asks for, for an approver.
func (a *ReadArgs) lines() string {
	switch {
	case a.Tail > 0:
		return fmt.Sprintf("last %d", a.Tail)
	case a.Limit > 0:
		return fmt.Sprintf("%d from line %d", a.Limit, max(a.Offset, 1))
	}
	return fmt.Sprintf("from line %d", a.Offset)
}
