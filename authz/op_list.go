package authz

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// opList lists a directory beneath a root: args {"path"}.
var opList = Op{
	Name:       api.OpList,
	Keys:       []string{"roots"},
	Resolve:    ResolveExisting,
	validate:   []validator{validateRoots},
	decode:     pathArgs,
	fromRecord: recordedPath,
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		return decidePath(ix, req, func(kind api.Kind, rootKey string) Decision {
			if kind == KindDir {
				return allow(rootKey)
			}
			return deny(api.ReasonNotADirectory, rootKey)
		})
	},
	schema: pathSchema(nil),
	show:   showPath,
	describe: func(t *Tool) string {
		return fmt.Sprintf("List a directory beneath %s: one JSON object per entry.", strings.Join(t.Roots, ", "))
	},
}
