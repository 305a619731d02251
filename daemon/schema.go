//go:build linux

package daemon

import (
	"encoding/json"

	"github.com/sluicehq/sluice/authz"
)

func describe(name string, t *authz.Tool) string {
	if t.Description != "" {
		return t.Description
	}
	if op := operations[t.Operation]; op != nil {
		return op.Describe(t)
	}
	return name
}

// argsSchema is the JSON Schema of a tool's args, ready to hand to a model
// as a function's parameters.
func argsSchema(t *authz.Tool) json.RawMessage {
	var s map[string]any
	if op := operations[t.Operation]; op != nil {
		s = op.Schema(t)
	}
	b, _ := json.Marshal(s)
	return b
}
