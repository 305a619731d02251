package authz

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// MkdirArgs are a mkdir's args: {"path", "parents"?}.
type MkdirArgs struct {
	Path    *string // nil when absent
	Parents bool
}

func (a *MkdirArgs) Subject() string { return derefOr(a.Path) }

// opMkdir makes a directory beneath a root (mkdirat in the held parent),
// and with "parents" each missing one above it, each made beneath the
// one before from the root's fd without following a symlink: args
// {"path", "parents"?}. The mode is the tool's dir_mode (0755 by
// default). It adds a name and destroys nothing.
var opMkdir = Op{
	Name:     api.OpMkdir,
	Hints:    api.ToolHints{Idempotent: true},
	Keys:     []string{"roots", "dir_mode"},
	Targets:  pathTarget(ResolveParent, func(a *MkdirArgs) *string { return a.Path }),
	when:     whenPaths,
	Effects:  true,
	validate: []validator{validateRoots, validateDirMode},
	decode: func(t *Tool, raw []byte, a *Args) error {
		var ma api.MkdirArgs
		if err := strictArgs(raw, &ma); err != nil {
			return err
		}
		a.Value = &MkdirArgs{Path: ma.Path, Parents: ma.Parents}
		if ma.Path == nil {
			a.Invalid = "args.path: required"
		}
		a.Record = RecordArgs(mustJSON(ma))
		return nil
	},
	fromRecord: func(t *Tool, rec []byte, a *Args) bool {
		var ma api.MkdirArgs
		if json.Unmarshal(rec, &ma) != nil {
			return false
		}
		a.Value = &MkdirArgs{Path: ma.Path, Parents: ma.Parents}
		return true
	},
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		ma, ok := argsOf[MkdirArgs](req)
		if !ok {
			return deny(api.ReasonInternalError, ix.key)
		}
		resolved := req.target(0)
		if ma.Parents && ma.Path != nil {
			resolved = missingParents(t, *ma.Path, resolved)
		}
		return decidePath(ix, ma.Path, resolved, mkdirKind)
	},
	schema: pathSchema(map[string]any{
		"parents": map[string]any{"type": "boolean", "description": "also make each missing directory above it (an existing directory is then not an error)"},
	}),
	show: func(t *Tool, a OpArgs, ch *api.ApprovalChange) {
		ma, ok := a.(*MkdirArgs)
		if !ok {
			return
		}
		showPath(ch, ma.Path, "")
		if ma.Parents {
			ch.Summary = append(ch.Summary, api.ChangeField{Label: "parents", Value: "true"})
		}
	},
	describe: func(t *Tool) string {
		return fmt.Sprintf("Make a directory beneath %s (parents: also each missing one above it).", strings.Join(t.Roots, ", "))
	},
}

// mkdirKind is a mkdir's check of what its final name is: nothing, or a
// directory (without parents, mkdirat refuses it when it runs,
// precondition_failed; with parents, it is there). Anything else in the
// way is not_a_directory.
func mkdirKind(kind api.Kind, rootKey string) Decision {
	switch kind {
	case KindAbsent, KindDir:
		return allow(rootKey)
	}
	return deny(api.ReasonNotADirectory, rootKey)
}

// missingParents is what a mkdir with parents decides on: a path whose
// parent does not exist yet (not_found under a root) is a directory to
// make there, at the path as requested: the daemon makes each component
// from the root's fd, one plain name at a time, refusing a symlink, "..",
// and anything but a directory in the way, so what it makes is at that
// path and nowhere else. The roots and never were checked on the path as
// requested, every ancestor included. Other outcomes stay as they are.
func missingParents(t *Tool, path string, resolved []Resource) []Resource {
	var fixed []Resource
	matches := MatchRoots(t, path)
	for i := range resolved {
		if resolved[i].Outcome != OutcomeNotFound || i >= len(matches) || resolved[i].Root != matches[i].Index {
			continue
		}
		if fixed == nil {
			fixed = append([]Resource(nil), resolved...)
		}
		fixed[i].Outcome, fixed[i].Kind, fixed[i].Rel = OutcomeOK, KindAbsent, matches[i].Rel
	}
	if fixed == nil {
		return resolved
	}
	return fixed
}

func validateDirMode(key string, t *Tool) error {
	if t.DirMode != "" {
		if _, err := ParseDirMode(t.DirMode); err != nil {
			return merr(key+".dir_mode", "%q %v", t.DirMode, err)
		}
	}
	return nil
}

// ParseDirMode reads an octal directory permission such as "0755" or
// "750": no set-id or sticky bits, and the owner may read, write and
// search.
func ParseDirMode(s string) (uint32, error) {
	if s == "" || len(s) > 4 {
		return 0, errors.New("is not an octal mode such as \"0755\"")
	}
	var m uint32
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, errors.New("is not an octal mode such as \"0755\"")
		}
		m = m<<3 | uint32(c-'0')
	}
	if m&^0o777 != 0 {
		return 0, errors.New("sets set-id or sticky bits; use permission bits only")
	}
	if m&0o700 != 0o700 {
		return 0, errors.New("must let the owner read, write and search (0700 at least)")
	}
	return m, nil
}

// EffectiveDirMode is dir_mode with its default applied.
func (t *Tool) EffectiveDirMode() uint32 {
	if m, err := ParseDirMode(t.DirMode); err == nil {
		return m
	}
	return DefaultDirMode
}
