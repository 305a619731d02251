package authz

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// opRead reads a file beneath a root: args {"path"}, at most max_bytes.
var opRead = Op{
	Name:       api.OpRead,
	Keys:       []string{"roots"},
	Resolve:    ResolveExisting,
	validate:   []validator{validateRoots},
	decode:     pathArgs,
	fromRecord: recordedPath,
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		return decidePath(ix, req, func(kind api.Kind, rootKey string) Decision {
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
	show:   showPath,
	describe: func(t *Tool) string {
		return fmt.Sprintf("Read a file (up to %d bytes) beneath %s.", t.EffectiveMaxBytes(), strings.Join(t.Roots, ", "))
	},
}
