//go:build linux

package daemon

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
)

// opSpec is everything the daemon knows about one operation, in one place
// (docs/design.md §1): how its args decode and are recorded, what it needs
// resolved, whether it has effects (its decision is then durable before
// the effect starts), its JSON Schema and description for /v1/tools, and
// its executor. authz holds the pure half: validators and the kind check.
type opSpec struct {
	decode  func(args []byte, dc *decoded) error
	resolve resolveHow
	effects bool
	// streams: output events may leave before the result record is
	// durable (they follow the durable decision). Only commands stream.
	streams  bool
	schema   func(t *authz.Tool) map[string]any
	describe func(t *authz.Tool) string
	exec     func(c *call, onChunk func(stream string, data []byte)) *outcome
}

// resolveHow says what a path-taking operation needs from the kernel.
type resolveHow int

const (
	resolveNone     resolveHow = iota // execute: mounts were resolved at load
	resolveExisting                   // read, list: the path must exist
	resolveParent                     // write, delete: the parent dir and a final name
)

var operations map[api.Operation]*opSpec

func init() {
	operations = map[api.Operation]*opSpec{
		api.OpRead: {
			decode: decodePathArgs, resolve: resolveExisting,
			schema: pathSchema(nil),
			describe: func(t *authz.Tool) string {
				return fmt.Sprintf("Read a file (up to %d bytes) beneath %s.", t.EffectiveMaxBytes(), strings.Join(t.Roots, ", "))
			},
			exec: execRead,
		},
		api.OpList: {
			decode: decodePathArgs, resolve: resolveExisting,
			schema: pathSchema(nil),
			describe: func(t *authz.Tool) string {
				return fmt.Sprintf("List a directory beneath %s: one JSON object per entry.", strings.Join(t.Roots, ", "))
			},
			exec: execList,
		},
		api.OpWrite: {
			decode: decodeWriteArgs, resolve: resolveParent, effects: true,
			schema: pathSchema(map[string]any{
				"content":     map[string]any{"type": "string", "description": "UTF-8 content"},
				"content_b64": map[string]any{"type": "string", "description": "base64 content, instead of content"},
				"mode": map[string]any{"type": "string", "enum": []string{authz.ModeCreate, authz.ModeOverwrite, authz.ModeCreateOrOverwrite},
					"description": "create (the file must not exist), overwrite (it must), or create_or_overwrite (default)"},
				"if_match": map[string]any{"type": "string", "description": `"sha256:<hex>" of the current content, or "absent"; checked when the write commits`},
			}),
			describe: func(t *authz.Tool) string {
				return fmt.Sprintf("Write a file beneath %s (atomically; returns its new sha256 for the next if_match).", strings.Join(t.Roots, ", "))
			},
			exec: execWrite,
		},
		api.OpDelete: {
			decode: decodeDeleteArgs, resolve: resolveParent, effects: true,
			schema: pathSchema(map[string]any{
				"if_match": map[string]any{"type": "string", "description": `"sha256:<hex>" of the current content; checked when the file is removed`},
			}),
			describe: func(t *authz.Tool) string {
				return fmt.Sprintf("Delete a file beneath %s.", strings.Join(t.Roots, ", "))
			},
			exec: execDelete,
		},
		api.OpExecute: {
			decode: decodeExecArgs, resolve: resolveNone, effects: true, streams: true,
			schema:   execSchema,
			describe: func(*authz.Tool) string { return "Run one of the allowed commands in a sandbox." },
			exec:     func(c *call, onChunk func(string, []byte)) *outcome { return c.runExec(onChunk) },
		},
	}
}

func decodePathArgs(args []byte, dc *decoded) error {
	var a api.PathArgs
	if err := strictDecode(args, &a); err != nil {
		return describeJSONError("args", err)
	}
	dc.areq.Path = a.Path
	if a.Path == nil {
		dc.areq.ArgsError = "args.path: required"
	}
	dc.argsRecord = recordArgs(mustJSON(a))
	return nil
}

func decodeWriteArgs(args []byte, dc *decoded) error {
	var a api.WriteArgs
	if err := strictDecode(args, &a); err != nil {
		return describeJSONError("args", err)
	}
	dc.areq.Path = a.Path
	// An omitted mode is the tool's own (create_or_overwrite by default).
	dc.areq.Mode = a.Mode
	if dc.areq.Mode == "" {
		dc.areq.Mode = dc.tool.Mode
	}
	if dc.areq.Mode == "" {
		dc.areq.Mode = authz.ModeCreateOrOverwrite
	}
	dc.ifMatch = a.IfMatch
	switch {
	case a.Path == nil:
		dc.areq.ArgsError = "args.path: required"
	case a.Content != nil && a.ContentB64 != nil:
		dc.areq.ArgsError = "args: give content or content_b64, not both"
	case a.Content == nil && a.ContentB64 == nil:
		dc.areq.ArgsError = "args.content: required (or content_b64)"
	case a.IfMatch != "" && a.IfMatch != "absent" && !isSHA256(a.IfMatch):
		dc.areq.ArgsError = `args.if_match: "sha256:<64 hex>" or "absent"`
	case a.Mode != "" && a.Mode != authz.ModeCreate && a.Mode != authz.ModeOverwrite && a.Mode != authz.ModeCreateOrOverwrite:
		dc.areq.ArgsError = "args.mode: create, overwrite or create_or_overwrite"
	}
	if a.Content != nil {
		dc.content = []byte(*a.Content)
	} else if a.ContentB64 != nil {
		b, err := decodeB64(*a.ContentB64)
		if err != nil && dc.areq.ArgsError == "" {
			dc.areq.ArgsError = "args.content_b64: not valid base64"
		}
		dc.content = b
	}
	dc.areq.ContentBytes = int64(len(dc.content))
	// No file body in the ledger: its digest and length only.
	rec := map[string]any{"content_sha256": sha256Of(dc.content), "content_len": len(dc.content), "mode": dc.areq.Mode}
	if a.Path != nil {
		rec["path"] = *a.Path
	}
	if a.IfMatch != "" {
		rec["if_match"] = a.IfMatch
	}
	dc.argsRecord = recordArgs(mustJSON(rec))
	return nil
}

func decodeDeleteArgs(args []byte, dc *decoded) error {
	var a api.DeleteArgs
	if err := strictDecode(args, &a); err != nil {
		return describeJSONError("args", err)
	}
	dc.areq.Path = a.Path
	dc.ifMatch = a.IfMatch
	switch {
	case a.Path == nil:
		dc.areq.ArgsError = "args.path: required"
	case a.IfMatch != "" && a.IfMatch != "absent" && !isSHA256(a.IfMatch):
		dc.areq.ArgsError = `args.if_match: "sha256:<64 hex>"`
	}
	dc.argsRecord = recordArgs(mustJSON(a))
	return nil
}

func decodeExecArgs(args []byte, dc *decoded) error {
	var a api.ExecArgs
	if err := strictDecode(args, &a); err != nil {
		return describeJSONError("args", err)
	}
	dc.areq.Argv = a.Argv
	dc.argsRecord = recordArgs(mustJSON(a))
	return nil
}

// pathSchema is the JSON Schema of a file tool's args: path, plus more.
func pathSchema(more map[string]any) func(t *authz.Tool) map[string]any {
	return func(t *authz.Tool) map[string]any {
		props := map[string]any{"path": map[string]any{
			"type":        "string",
			"description": "Path relative to the workspace base, beneath one of: " + strings.Join(t.Roots, ", ") + " (e.g. " + exampleUnder(t) + ").",
		}}
		for k, v := range more {
			props[k] = v
		}
		return map[string]any{"type": "object", "additionalProperties": false, "required": []string{"path"}, "properties": props}
	}
}

func execSchema(t *authz.Tool) map[string]any {
	argv := map[string]any{
		"type": "array", "items": map[string]any{"type": "string"},
		"enum": t.Commands, "description": "One of the allowed command lines, exactly.",
	}
	s := map[string]any{
		"type": "object", "additionalProperties": false,
		"properties": map[string]any{"argv": argv},
	}
	if len(t.Commands) > 1 {
		s["required"] = []string{"argv"}
	}
	return s
}
