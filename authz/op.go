package authz

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/redact"
	"github.com/sluicehq/sluice/internal/strictjson"
)

// Op is the pure half of one operation (docs/design.md, "One operation,
// one unit"): the manifest keys it owns and their validators, how its args
// decode from a request and from a ledger record, what the daemon must
// resolve before it decides, its decision, and what /v1/tools says of it.
// Its effectful half (prepare at load, resolve, execute, a typed result)
// is the daemon's. Nothing else switches on the operation: adding one is
// an op_NAME.go here, its twin in the daemon, its args in api, and docs.
type Op struct {
	Name api.Operation
	// Keys are the tool keys the operation takes beyond the common ones
	// (description, max_bytes, approval, approval_timeout_ms, never); a
	// key another operation owns is refused on its tools.
	Keys []string
	// Resolve is what the daemon resolves before the decision.
	Resolve Resolve
	// Effects: the decision is durable before the effect starts.
	Effects bool
	// Streams: output events may leave before the result record is
	// durable (they follow the durable decision). Only commands stream.
	Streams bool
	// Binds: an approval binds the call to its Args.Bound (a write's
	// content, a post's body): approved, it must carry the same bytes.
	Binds bool

	validate []validator
	// decode fills a from a request's args: type errors are errors (the
	// caller's, a 400); args of the right types that break a rule set
	// a.Invalid (decided invalid_args).
	decode func(t *Tool, raw []byte, a *Args) error
	// fromRecord fills a from the args a decision record holds (what
	// decode recorded), for replay; false when they cannot be re-decided.
	fromRecord func(t *Tool, rec []byte, a *Args) bool
	decide     func(t *Tool, ix *toolIndex, req *Request) Decision
	schema     func(t *Tool) map[string]any
	describe   func(t *Tool) string
	// show fills what an approver is shown of a call, as far as its args
	// say (a write's new digest, a post's URL and body digest); the
	// daemon's half adds what needs the kernel or the parked body (the
	// file as it is now, a diff, the body itself).
	show func(t *Tool, a *Args, ch *api.ApprovalChange)
}

// Resolve says what a path-taking operation needs from the kernel.
type Resolve int

const (
	ResolveNone     Resolve = iota // execute: mounts were resolved at load
	ResolveExisting                // read, list: the path must exist
	ResolveParent                  // write, delete: the parent dir and a final name
	ResolveNet                     // fetch, post: the URL's host, looked up once
)

// ops is the one table of operations, in the order messages name them.
var ops = []*Op{&opRead, &opList, &opWrite, &opDelete, &opExecute, &opFetch, &opPost}

// LookupOp returns the operation named op, or nil.
func LookupOp(op api.Operation) *Op {
	for _, o := range ops {
		if o.Name == op {
			return o
		}
	}
	return nil
}

// operationList names the operations, for messages: "read, list, … or execute".
func operationList() string {
	names := make([]string, len(ops))
	for i, o := range ops {
		names[i] = string(o.Name)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Args are a call's args as its operation decoded them.
type Args struct {
	// Path is args.path of file tools; nil when absent.
	Path *string
	// Argv is args.argv of execute tools; nil when absent.
	Argv []string
	// Mode is a write's mode (create, overwrite, create_or_overwrite).
	Mode api.WriteMode
	// Content is a write's body; ContentBytes its length (what the
	// decision sees, as replay does: the ledger keeps only the length).
	Content      []byte
	ContentBytes int64
	// IfMatch is a write's or delete's precondition.
	IfMatch string
	// URL, Method and Headers are a fetch's; URL and Body a post's
	// (BodyBytes its length, what the decision and replay see).
	URL       *string
	Method    string
	Headers   map[string]string
	Body      []byte
	BodyBytes int64
	// Bound is what an approval of the call binds it to: a write's
	// content, a post's body (the approver saw it; the approved call must
	// carry the same bytes). Nil when the operation binds none.
	Bound []byte
	// Invalid is set when the args fit the schema's types but not its
	// rules (a required key missing, both content forms given).
	Invalid string
	// Record is what the ledger keeps of the args: never a file body.
	Record json.RawMessage
}

// Request is the request Decide sees for these args: what the decision
// depends on (the body and the precondition do not).
func (a *Args) Request(principal, tool string) Request {
	return Request{Principal: principal, Tool: tool, Path: a.Path, Argv: a.Argv,
		ArgsError: a.Invalid, Mode: a.Mode, ContentBytes: a.ContentBytes,
		URL: a.URL, Headers: a.Headers, BodyBytes: a.BodyBytes}
}

// TypeError is args that do not fit their schema's types: the caller's
// mistake, told to it (400), not a decision.
type TypeError struct{ Msg string }

func (e *TypeError) Error() string { return e.Msg }

// DecodeArgs decodes a request's args for tool t strictly (no unknown
// fields, exact keys, no trailing data).
func (o *Op) DecodeArgs(t *Tool, raw []byte) (Args, error) {
	var a Args
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	err := o.decode(t, raw, &a)
	return a, err
}

// ArgsFromRecord rebuilds the args a decision record holds, as DecodeArgs
// recorded them; ok is false when they cannot be re-decided (recorded by
// digest only).
func (o *Op) ArgsFromRecord(t *Tool, rec []byte) (a Args, ok bool) {
	if len(rec) == 0 {
		rec = []byte("{}")
	}
	var elided struct {
		Elided bool `json:"elided"`
	}
	if json.Unmarshal(rec, &elided) != nil || elided.Elided {
		return a, false
	}
	return a, o.fromRecord(t, rec, &a)
}

// Approval is how an approver is shown a call of tool t with args a
// (docs/design.md §2, "An operation is one unit"), as far as the args
// say; every client renders it without knowing the operation.
func (o *Op) Approval(t *Tool, a *Args) *api.ApprovalChange {
	ch := &api.ApprovalChange{Kind: o.Name}
	if o.show != nil {
		o.show(t, a, ch)
	}
	return ch
}

// showPath is a file tool's approval: its path, and its precondition.
func showPath(_ *Tool, a *Args, ch *api.ApprovalChange) {
	if a.Path != nil {
		ch.Summary = append(ch.Summary, api.ChangeField{Label: "path", Value: *a.Path})
	}
	if a.IfMatch != "" {
		ch.Summary = append(ch.Summary, api.ChangeField{Label: "if_match", Value: a.IfMatch})
	}
}

// Schema is the JSON Schema of t's args, for /v1/tools.
func (o *Op) Schema(t *Tool) map[string]any { return o.schema(t) }

// Describe is t's description when the manifest gives none.
func (o *Op) Describe(t *Tool) string { return o.describe(t) }

// strictArgs decodes raw into v strictly, as a *TypeError.
func strictArgs(raw []byte, v any) error {
	if err := strictjson.Decode(raw, v); err != nil {
		return &TypeError{strictjson.Describe("args", err)}
	}
	return nil
}

// MaxArgsRecord bounds the args a ledger record keeps as given; larger
// ones are recorded by digest, so one call cannot bloat the ledger.
const MaxArgsRecord = 8 << 10

// RecordArgs returns args for the ledger: as given (compacted) when
// small, else by digest.
func RecordArgs(args []byte) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, args); err == nil && buf.Len() <= MaxArgsRecord {
		return buf.Bytes()
	}
	return mustJSON(map[string]any{"elided": true, "sha256": sha256Of(args), "bytes": len(args)})
}

// maxArgHint bounds each value an elided args record keeps beside its
// digest to say which call it was (an execute's argv[0]).
const maxArgHint = 128

// withHint adds hint's values, each bounded, to rec when RecordArgs kept
// only a digest, so that the record still says what was asked ("argv0",
// "argc"); rec as it is otherwise. Replay still counts such args as not
// re-decidable.
func withHint(rec json.RawMessage, hint map[string]any) json.RawMessage {
	var el map[string]any
	if json.Unmarshal(rec, &el) != nil || el["elided"] != true {
		return rec
	}
	for k, v := range hint {
		if s, ok := v.(string); ok {
			v = redact.String(s, maxArgHint)
		}
		el[k] = v
	}
	return mustJSON(el)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain values come here
	}
	return b
}

func sha256Of(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func isSHA256(s string) bool {
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// pathSchema is the JSON Schema of a file tool's args: path, plus more.
func pathSchema(more map[string]any) func(t *Tool) map[string]any {
	return func(t *Tool) map[string]any {
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

// exampleUnder is an example path beneath t's first root.
func exampleUnder(t *Tool) string {
	if len(t.Roots) == 0 {
		return "a/b"
	}
	r := strings.TrimSuffix(t.Roots[0], "/")
	if r == "." || r == "" {
		return "file.txt"
	}
	return r + "/file.txt"
}

// pathArgs decodes {"path"} args (read, list): the recorded form is the
// decoded one.
func pathArgs(t *Tool, raw []byte, a *Args) error {
	var pa api.PathArgs
	if err := strictArgs(raw, &pa); err != nil {
		return err
	}
	a.Path = pa.Path
	if pa.Path == nil {
		a.Invalid = "args.path: required"
	}
	a.Record = RecordArgs(mustJSON(pa))
	return nil
}

// recordedPath reads back what pathArgs recorded.
func recordedPath(t *Tool, rec []byte, a *Args) bool {
	var pa struct {
		Path *string `json:"path"`
	}
	if json.Unmarshal(rec, &pa) != nil {
		return false
	}
	a.Path = pa.Path
	return true
}

// keyIsSet reports which of a tool's operation-specific keys are set.
func keyIsSet(t *Tool) []struct {
	set  bool
	name string
} {
	return []struct {
		set  bool
		name string
	}{
		{len(t.Roots) > 0, "roots"},
		{len(t.Commands) > 0, "commands"}, {len(t.Mounts) > 0, "mounts"}, {t.Cwd != "", "cwd"},
		{t.Env != nil, "env"}, {t.TimeoutMS != 0, "timeout_ms"}, {t.MemoryMB != 0, "memory_mb"},
		{t.Pids != 0, "pids"}, {t.CPUs != 0, "cpus"}, {t.Seccomp != "", "seccomp"}, {t.Pool != nil, "pool"}, {t.PoolMax != nil, "pool_max"},
		{t.MaxOpenFiles != 0, "max_open_files"}, {t.Egress != nil, "egress"},
		{t.Mode != "", "mode"}, {t.FileMode != "", "file_mode"},
		{len(t.Hosts) > 0, "hosts"}, {len(t.Schemes) > 0, "schemes"}, {t.MaxRedirects != nil, "max_redirects"},
		{t.AllowedHeaders != nil, "allowed_headers"}, {t.InsecureAllowPrivate, "insecure_allow_private"},
		{len(t.Webhooks) > 0, "webhooks"}, {t.MaxRequestBytes != 0, "max_request_bytes"},
	}
}

// ownKeys refuses the keys of other operations on t: a tool takes only
// the common keys and its operation's own.
func (o *Op) ownKeys(key string, t *Tool) error {
	for _, k := range keyIsSet(t) {
		if k.set && !slicesContains(o.Keys, k.name) {
			return merr(key+"."+k.name, "does not apply to %s tools; %s", t.Operation, whoTakes(k.name))
		}
	}
	return nil
}

// whoTakes says which operations take a key, for messages.
func whoTakes(name string) string {
	var by []string
	for _, o := range ops {
		if slicesContains(o.Keys, name) {
			by = append(by, string(o.Name))
		}
	}
	if len(by) == 0 {
		return "remove it"
	}
	return fmt.Sprintf("it applies to %s tools; remove it", strings.Join(by, " and "))
}
