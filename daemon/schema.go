package daemon

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
)

func describe(name string, t *authz.Tool) string {
	if t.Description != "" {
		return t.Description
	}
	switch t.Operation {
	case api.OpRead:
		return fmt.Sprintf("Read a file (up to %d bytes) beneath %s.", t.EffectiveMaxBytes(), strings.Join(t.Roots, ", "))
	case api.OpList:
		return fmt.Sprintf("List a directory beneath %s: one JSON object per entry.", strings.Join(t.Roots, ", "))
	case api.OpWrite:
		return fmt.Sprintf("Write a file beneath %s.", strings.Join(t.Roots, ", "))
	case api.OpExecute:
		return "Run one of the allowed commands in a sandbox."
	}
	return name
}

// argsSchema is the JSON Schema of a tool's args, ready to hand to a model
// as a function's parameters.
func argsSchema(t *authz.Tool) json.RawMessage {
	pathProp := map[string]any{
		"type":        "string",
		"description": "Path relative to the workspace base, beneath one of: " + strings.Join(t.Roots, ", ") + " (e.g. " + exampleUnder(t) + ").",
	}
	var s map[string]any
	switch t.Operation {
	case api.OpRead, api.OpList:
		s = map[string]any{
			"type": "object", "additionalProperties": false, "required": []string{"path"},
			"properties": map[string]any{"path": pathProp},
		}
	case api.OpWrite:
		s = map[string]any{
			"type": "object", "additionalProperties": false, "required": []string{"path"},
			"properties": map[string]any{
				"path":        pathProp,
				"content":     map[string]any{"type": "string", "description": "UTF-8 content"},
				"content_b64": map[string]any{"type": "string", "description": "base64 content, instead of content"},
				"if_match":    map[string]any{"type": "string", "description": `"sha256:<hex>" of the current content, or "absent"`},
			},
		}
	case api.OpExecute:
		argv := map[string]any{
			"type": "array", "items": map[string]any{"type": "string"},
			"enum": t.Commands, "description": "One of the allowed command lines, exactly.",
		}
		s = map[string]any{
			"type": "object", "additionalProperties": false,
			"properties": map[string]any{"argv": argv},
		}
		if len(t.Commands) > 1 {
			s["required"] = []string{"argv"}
		}
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
