//go:build linux

package daemon

import (
	"encoding/json"
	"strings"

	"github.com/sluicehq/sluice/authz"
)

func describe(name string, t *authz.Tool) string {
	if t.Description != "" {
		return t.Description
	}
	if op := operations[t.Operation]; op != nil {
		return op.describe(t)
	}
	return name
}

// argsSchema is the JSON Schema of a tool's args, ready to hand to a model
// as a function's parameters.
func argsSchema(t *authz.Tool) json.RawMessage {
	var s map[string]any
	if op := operations[t.Operation]; op != nil {
		s = op.schema(t)
	}
	b, _ := json.Marshal(s)
	return b
}

func exampleUnder(t *authz.Tool) string {
	if len(t.Roots) == 0 {
		return "a/b"
	}
	r := strings.TrimSuffix(t.Roots[0], "/")
	if r == "." || r == "" {
		return "file.txt"
	}
	return r + "/file.txt"
}
