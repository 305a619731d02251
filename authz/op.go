package authz

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/egress/netpolicy"
	"github.com/sluicehq/sluice/internal/redact"
	"github.com/sluicehq/sluice/internal/strictjson"
)

// Op is the pure half of one operation (docs/design.md, "One operation,
// one unit"): the manifest keys it owns and their validators, how its args
// decode into its own args type (OpArgs) from a request and from a ledger
// record, the targets the daemon must resolve before it decides, its
// decision, how an approver is shown it, and what /v1/tools says of it.
// Its effectful half (prepare at load, execute, a typed result) is the
// daemon's. Nothing else switches on the operation: adding one is an
// op_NAME.go here and a line in ops, its twin in the daemon and a line in
// its table, its args in api, and docs.
type Op struct {
	Name api.Operation
	// Keys are the tool keys the operation takes beyond the common ones
	// (description, max_bytes, approval, approval_timeout_ms, never); a
	// key another operation owns is refused on its tools.
	Keys []string
	// Targets are what the daemon resolves before the decision, in
	// order: each an arg of the call that names something (a path, a
	// URL) and how the kernel or the resolver is asked about it. The
	// request carries one list of resolutions per target (Request.
	// Resolved), so an operation of two paths (a move's "path" and "to")
	// fits as one of one does. An execute's one target is its argv
	// (ResolveArgs): the arguments its path elements could match, each
	// resolved beneath the element's roots; its mounts were resolved at
	// load.
	Targets []Target
	// Effects: the operation's calls may have effects outside sluiced
	// and its sandboxes, so a call's decision is durable before its
	// effect starts. Whether one call has them is EffectsOf's.
	Effects bool
	// effectFree, when set, says that a call of tool t has no effect
	// although the operation may (execute without egress: its command
	// reads through its view and writes nothing the host keeps). Such a
	// call may run while its decision syncs; only its output waits for
	// the records that explain it (docs/design.md §3).
	effectFree func(t *Tool) bool
	// Streams: output events may leave before the result record is
	// durable (they follow the durable decision). Only commands stream.
	Streams bool
	// Binds: an approval binds the call to its Args.Bound (a write's
	// content, a post's body): approved, it must carry the same bytes.
	Binds bool
	// Hints are what /v1/tools says of the operation's effects (MCP's
	// tool annotations).
	Hints api.ToolHints

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
	show func(t *Tool, a OpArgs, ch *api.ApprovalChange)
	// when matches the operation's calls against a tool's approval_when
	// (approval_scale.go); nil: it takes none, and every call waits.
	when *whenMatcher
	// net authorizes a network operation's args under the tool's policy
	// into the request it sends (fetch: its hosts and headers; post: its
	// webhooks): NetTarget, once per resolution, and Decide for a request
	// that carries none.
	net netAuthorizer
}

// netAuthorizer is an operation's pure authorization of its URL target.
type netAuthorizer func(p *netpolicy.Policy, a OpArgs) (*netpolicy.Request, error)

// OpArgs are one operation's typed args (ReadArgs, WriteArgs, FetchArgs,
// …): each operation owns its type, and only its own file looks inside.
type OpArgs interface {
	// Subject names what the call is about, for reports (replay): a
	// path, an argv, a URL as recorded.
	Subject() string
}

// Resolve says how a target is resolved before the decision.
type Resolve int

const (
	_               Resolve = iota
	ResolveExisting         // the path must exist (read, list): a handle on it
	ResolveParent           // the parent dir and a final name, not followed (write, delete)
	ResolveNet              // a URL's host, looked up once (fetch, post)
	// ResolveArgs: an execute's arguments that its commands' path
	// elements could match, each beneath the element's roots (ArgPaths).
	ResolveArgs
)

// Target is one thing an operation resolves before its decision: the arg
// that names it and how it is resolved.
type Target struct {
	// Name is the arg that names it ("path", "to", "url"); a ledger
	// record of an operation of several targets keys their resolutions
	// by it.
	Name    string
	Resolve Resolve
	// of is the target's value in the operation's args; nil when absent.
	of func(OpArgs) *string
}

// Value is the target's value in a, or nil (absent, or not this
// operation's args).
func (tg *Target) Value(a OpArgs) *string {
	if a == nil || tg.of == nil {
		return nil
	}
	return tg.of(a)
}

// EffectsOf says whether a call of tool t has effects outside sluiced and
// its sandboxes: then its decision is durable before the call runs
// (docs/design.md §3). An unknown tool is taken to have them.
func (o *Op) EffectsOf(t *Tool) bool {
	if !o.Effects {
		return false
	}
	return t == nil || o.effectFree == nil || !o.effectFree(t)
}

// WritesRoots says whether the operation changes files beneath its roots
// (a target resolved as a parent and a final name: write, delete).
func (o *Op) WritesRoots() bool {
	for i := range o.Targets {
		if o.Targets[i].Resolve == ResolveParent {
			return true
		}
	}
	return false
}

// Network says whether the operation reaches the network itself (a URL
// target: fetch, post).
func (o *Op) Network() bool {
	for i := range o.Targets {
		if o.Targets[i].Resolve == ResolveNet {
			return true
		}
	}
	return false
}

// NetTarget is a fetch's or post's URL target as its tool's policy
// authorized it (Op.NetTarget): the request to send (netpolicy.Request:
// scheme, host, port, the URL with its path and query as sent, the
// effective method, the allowed headers, the entry that allowed it), or
// why it is refused. It is the URL's held fd: the daemon makes it once
// when it resolves the call, looks its host up once only when it is
// allowed, and carries both in the target's Resource; Decide checks them
// and the executor sends exactly this request to the address the
// decision checked. It is never recorded: replay builds it again from
// the recorded URL by the same pure function.
type NetTarget struct {
	// Request is the authorized request; nil when refused.
	Request *netpolicy.Request
	err     error  // why it is refused
	args    OpArgs // the args it was made from
}

// Refused says whether the policy refused the URL (or its method or
// headers): its host is not looked up.
func (nt *NetTarget) Refused() bool { return nt.Request == nil }

// NetTarget authorizes a network operation's args under t's policy, once,
// as Decide will check it, before the daemon looks the URL's host up: a
// refused URL costs no lookup.
func (o *Op) NetTarget(t *Tool, a OpArgs) *NetTarget { return newNetTarget(o.net, t, a) }

func newNetTarget(authorize netAuthorizer, t *Tool, a OpArgs) *NetTarget {
	nt := &NetTarget{args: a}
	p := t.NetPolicy()
	if p == nil || authorize == nil {
		nt.err = errNoNet
		return nt
	}
	nt.Request, nt.err = authorize(p, a)
	if nt.Request == nil && nt.err == nil {
		nt.err = errNoNet
	}
	return nt
}

var errNoNet = errors.New("not a network operation")

// ops is the one table of operations, in the order messages name them.
var ops = []*Op{&opRead, &opList, &opStat, &opSearch, &opWrite, &opEdit, &opMove, &opMkdir, &opDelete, &opExecute, &opFetch, &opPost}

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

// Args are a call's args as its operation decoded them: what is common
// to every operation, and the operation's own typed args behind OpArgs.
type Args struct {
	// Value is the operation's typed args (*ReadArgs, *WriteArgs, …).
	Value OpArgs
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
	return Request{Principal: principal, Tool: tool, Args: a.Value, ArgsError: a.Invalid}
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
	if o.show != nil && a.Value != nil {
		o.show(t, a.Value, ch)
	}
	return ch
}

// showPath is a file tool's approval: its path, and its precondition.
func showPath(ch *api.ApprovalChange, path *string, ifMatch string) {
	if path != nil {
		ch.Summary = append(ch.Summary, api.ChangeField{Label: "path", Value: *path})
	}
	if ifMatch != "" {
		ch.Summary = append(ch.Summary, api.ChangeField{Label: "if_match", Value: ifMatch})
	}
}

// pathTarget is the one "path" target of a file operation whose args
// name it by path(a).
func pathTarget[A OpArgs](how Resolve, path func(A) *string) []Target {
	return []Target{{Name: "path", Resolve: how, of: func(a OpArgs) *string {
		if v, ok := a.(A); ok {
			return path(v)
		}
		return nil
	}}}
}

// derefOr is *p, or "" when p is nil.
func derefOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
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

// decodePath decodes {"path"} args (stat): the recorded form is the
// decoded one.
func decodePath(raw []byte, a *Args) (*string, error) {
	var pa api.PathArgs
	if err := strictArgs(raw, &pa); err != nil {
		return nil, err
	}
	if pa.Path == nil {
		a.Invalid = "args.path: required"
	}
	a.Record = RecordArgs(mustJSON(pa))
	return pa.Path, nil
}

// recordedPath reads back what decodePath recorded.
func recordedPath(rec []byte) (*string, bool) {
	var pa struct {
		Path *string `json:"path"`
	}
	if json.Unmarshal(rec, &pa) != nil {
		return nil, false
	}
	return pa.Path, true
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
		{len(t.Commands) > 0, "commands"}, {t.Examples != nil, "examples"}, {len(t.Mounts) > 0, "mounts"}, {t.Cwd != "", "cwd"},
		{t.Env != nil, "env"}, {t.TimeoutMS != 0, "timeout_ms"}, {t.MemoryMB != 0, "memory_mb"},
		{t.Pids != 0, "pids"}, {t.CPUs != 0, "cpus"}, {t.Seccomp != "", "seccomp"}, {t.Pool != nil, "pool"}, {t.PoolMax != nil, "pool_max"},
		{t.MaxOpenFiles != 0, "max_open_files"}, {t.Egress != nil, "egress"},
		{t.Writes != nil, "writes"}, {t.Cache != nil, "cache"}, {t.CacheMB != 0, "cache_mb"},
		{t.Mode != "", "mode"}, {t.FileMode != "", "file_mode"}, {t.DirMode != "", "dir_mode"},
		{len(t.Hosts) > 0, "hosts"}, {len(t.Schemes) > 0, "schemes"}, {t.MaxRedirects != nil, "max_redirects"},
		{t.AllowedHeaders != nil, "allowed_headers"}, {t.InsecureAllowPrivate, "insecure_allow_private"},
		{len(t.Webhooks) > 0, "webhooks"}, {t.MaxRequestBytes != 0, "max_request_bytes"},
		{t.Credentials != nil, "credentials"},
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
