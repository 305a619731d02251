package api

import "encoding/json"

// Version is the protocol and release version reported by /v1/health.
const Version = "0.1.0"

// DefaultSocket is where sluiced listens unless --socket says otherwise.
const DefaultSocket = "/run/sluice/sluice.sock"

// Verdict is a decision's outcome: allow, deny, or pending (waiting for
// a human).
type Verdict string

// Verdicts.
const (
	VerdictAllow   Verdict = "allow"
	VerdictDeny    Verdict = "deny"
	VerdictPending Verdict = "pending"
)

// Reason is a stable reason code (see Reasons).
type Reason string

// Reason codes are stable strings: tooling keys statistics and replay on
// them, so they are never reworded.
const (
	ReasonAllowed             Reason = "allowed"
	ReasonUnknownTool         Reason = "unknown_tool"
	ReasonPrincipalNotAllowed Reason = "principal_not_allowed"
	ReasonInvalidArgs         Reason = "invalid_args"
	ReasonInvalidPath         Reason = "invalid_path"
	ReasonOutsideRoots        Reason = "outside_roots"
	ReasonNeverListed         Reason = "never_listed"
	ReasonNotFound            Reason = "not_found"
	ReasonNotAFile            Reason = "not_a_file"
	ReasonNotADirectory       Reason = "not_a_directory"
	ReasonUnsupportedFileType Reason = "unsupported_file_type"
	ReasonCommandNotAllowed   Reason = "command_not_allowed"
	// ReasonEgressDenied: a fetch's or post's URL (scheme, host, port, a
	// URL trick), a header, or the address its name resolved to is not
	// allowed; also a redirect to such a URL (nothing was sent there).
	ReasonEgressDenied     Reason = "egress_denied"
	ReasonApprovalRequired Reason = "approval_required"
	ReasonApprovalDenied   Reason = "approval_denied"
	ReasonApprovalExpired  Reason = "approval_expired"
	ReasonTaskCancelled    Reason = "task_cancelled"
	// ReasonCancelled: the call itself was cancelled (POST
	// /v1/calls/{id}/cancel, e.g. sluice mcp on notifications/cancelled)
	// or its client went away: a running command is killed, a parked
	// call ends, a write not yet committed does not commit.
	ReasonCancelled          Reason = "cancelled"
	ReasonPreconditionFailed Reason = "precondition_failed"
	ReasonAuditUnavailable   Reason = "audit_unavailable"
	ReasonTimeout            Reason = "timeout"
	ReasonLimitExceeded      Reason = "limit_exceeded"
	ReasonBusy               Reason = "busy"     // no container slot within the queue wait; nothing ran
	ReasonShutdown           Reason = "shutdown" // sluiced stopped before the call finished
	// ReasonNoSpace: the target file system (or the ledger's) is below its
	// reserve or full (ENOSPC, EDQUOT); nothing was changed.
	ReasonNoSpace Reason = "no_space"
	// ReasonNotDurable: a write or delete committed (the result says what it
	// left), but the directory fsync that makes it survive a crash failed;
	// the result carries durable:false.
	ReasonNotDurable Reason = "not_durable"
	// ReasonKilled: a process outside sluice killed the command's container
	// (the result carries the signal); it did not exit by itself.
	ReasonKilled Reason = "killed"
	// ReasonUpstreamError: an allowed fetch or post failed on the way:
	// the name did not resolve, the connection or TLS failed, it timed out.
	ReasonUpstreamError Reason = "upstream_error"
	// ReasonRateLimited: the principal's (or token's) call rate or quota
	// was exceeded (docs/design.md §11); nothing ran.
	ReasonRateLimited Reason = "rate_limited"
	// ReasonBudgetExhausted: the principal (or token) spent its
	// denial_budget in the current window (a model probing the tree);
	// every call is refused until the window passes or an approver
	// resets it.
	ReasonBudgetExhausted Reason = "budget_exhausted"
	// ReasonTokenInvalid: the delegation token presented is unknown,
	// expired, revoked, for another daemon, or presented by the wrong
	// peer. A wrong token never falls back to the peer's own rights.
	ReasonTokenInvalid  Reason = "token_invalid"
	ReasonInternalError Reason = "internal_error"
	// ReasonUnavailable is what an opaque manifest (deny_detail "opaque")
	// shows a denied caller instead of the real reason.
	ReasonUnavailable = "unavailable"
)

// Reasons lists every stable reason code, for documentation and tests.
var Reasons = []Reason{
	ReasonAllowed, ReasonUnknownTool, ReasonPrincipalNotAllowed, ReasonInvalidArgs,
	ReasonInvalidPath, ReasonOutsideRoots, ReasonNeverListed, ReasonNotFound,
	ReasonNotAFile, ReasonNotADirectory, ReasonUnsupportedFileType,
	ReasonCommandNotAllowed, ReasonEgressDenied, ReasonApprovalRequired, ReasonApprovalDenied,
	ReasonApprovalExpired, ReasonTaskCancelled, ReasonCancelled, ReasonPreconditionFailed,
	ReasonAuditUnavailable, ReasonTimeout, ReasonLimitExceeded, ReasonBusy, ReasonShutdown,
	ReasonNoSpace, ReasonNotDurable, ReasonKilled, ReasonUpstreamError, ReasonRateLimited,
	ReasonBudgetExhausted, ReasonTokenInvalid, ReasonInternalError,
}

// Operation is what a tool does.
type Operation string

// Operations a tool may perform.
const (
	OpRead    Operation = "read"
	OpList    Operation = "list"
	OpWrite   Operation = "write"
	OpDelete  Operation = "delete"
	OpExecute Operation = "execute"
	OpFetch   Operation = "fetch"  // performed by the daemon: GET or HEAD of an allowed URL
	OpPost    Operation = "post"   // performed by the daemon: a JSON body to an allowed webhook
	OpStat    Operation = "stat"   // what a path is: type, size, mode, mtime, a regular file's sha256
	OpSearch  Operation = "search" // names by glob and lines by RE2 beneath a directory
	OpEdit    Operation = "edit"   // exact replacements in a file, committed as a write is
	OpMove    Operation = "move"   // a rename beneath the roots that never replaces
	OpMkdir   Operation = "mkdir"  // a directory, and with parents each missing one above it
)

// WriteMode is how a write may treat the file at its path.
type WriteMode string

// Write modes.
const (
	WriteCreate            WriteMode = "create"              // the file must not exist
	WriteOverwrite         WriteMode = "overwrite"           // it must
	WriteCreateOrOverwrite WriteMode = "create_or_overwrite" // either (the default)
)

// ApprovalRule is who must say yes before a tool's call runs (a tool's
// "approval").
type ApprovalRule string

// Approval rules.
const (
	ApprovalNone  ApprovalRule = "none"  // nobody (the default)
	ApprovalHuman ApprovalRule = "human" // an approver principal, per call
)

// Kind is what a path names, as the kernel says (fstat of the resolved
// fd, or fstatat of a final name that is not followed). One type for the
// resolver, the policy and the audit.
type Kind string

// File kinds.
const (
	KindFile    Kind = "file"
	KindDir     Kind = "dir"
	KindSymlink Kind = "symlink"
	KindFIFO    Kind = "fifo"
	KindSocket  Kind = "socket"
	KindDevice  Kind = "device"
	KindOther   Kind = "other"
	// KindAbsent: a write's or delete's final name does not exist (its
	// parent does).
	KindAbsent Kind = "absent"
)

// CallRequest is the body of POST /v1/calls. Args is kept raw: its schema
// depends on the tool's operation and is decoded strictly by the daemon.
type CallRequest struct {
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args,omitempty"`
	Task   string          `json:"task,omitempty"`
	Stream bool            `json:"stream,omitempty"`
}

// PathArgs are the args of tools that take a path alone (stat).
type PathArgs struct {
	Path *string `json:"path"`
}

// ReadArgs are the args of read tools. Offset (the first line, from 1)
// and Limit (lines) select a range, Tail the last lines; none: the whole
// file up to max_bytes.
type ReadArgs struct {
	Path   *string `json:"path"`
	Offset *int64  `json:"offset,omitempty"`
	Limit  *int64  `json:"limit,omitempty"`
	Tail   *int64  `json:"tail,omitempty"`
}

// ListArgs are the args of list tools: Depth levels below path (1, the
// default, is the directory itself), Sizes to give files' sizes.
type ListArgs struct {
	Path  *string `json:"path"`
	Depth *int    `json:"depth,omitempty"`
	Sizes bool    `json:"sizes,omitempty"`
}

// SearchArgs are the args of search tools: names by glob (Name), lines
// by an RE2 regular expression (Content), or both.
type SearchArgs struct {
	Path       *string `json:"path"`
	Name       string  `json:"name,omitempty"`
	Content    string  `json:"content,omitempty"`
	MaxResults *int    `json:"max_results,omitempty"`
}

// Edit is one exact replacement: OldText must occur exactly once in the
// file as the edits before it left it.
type Edit struct {
	OldText string `json:"old_text"`
	NewText string `json:"new_text"`
}

// EditArgs are the args of edit tools.
type EditArgs struct {
	Path    *string `json:"path"`
	Edits   []Edit  `json:"edits"`
	DryRun  bool    `json:"dry_run,omitempty"`
	IfMatch string  `json:"if_match,omitempty"`
}

// MoveArgs are the args of move tools: Path moves to To, which must not
// exist.
type MoveArgs struct {
	Path    *string `json:"path"`
	To      *string `json:"to"`
	IfMatch string  `json:"if_match,omitempty"`
}

// MkdirArgs are the args of mkdir tools.
type MkdirArgs struct {
	Path    *string `json:"path"`
	Parents bool    `json:"parents,omitempty"`
}

// WriteArgs are the args of write tools.
type WriteArgs struct {
	Path       *string `json:"path"`
	Content    *string `json:"content,omitempty"`
	ContentB64 *string `json:"content_b64,omitempty"`
	// Mode is create, overwrite or create_or_overwrite (the default).
	Mode    WriteMode `json:"mode,omitempty"`
	IfMatch string    `json:"if_match,omitempty"`
}

// DeleteArgs are the args of delete tools.
type DeleteArgs struct {
	Path    *string `json:"path"`
	IfMatch string  `json:"if_match,omitempty"`
}

// ExecArgs are the args of execute tools.
type ExecArgs struct {
	Argv []string `json:"argv,omitempty"`
}

// FetchArgs are the args of fetch tools.
type FetchArgs struct {
	URL *string `json:"url"`
	// Method is GET (the default) or HEAD.
	Method string `json:"method,omitempty"`
	// Headers are request headers: only those the tool's allowed_headers
	// names (Accept by default).
	Headers map[string]string `json:"headers,omitempty"`
}

// PostArgs are the args of post tools: a JSON body for a webhook.
type PostArgs struct {
	URL  *string         `json:"url"`
	Body json.RawMessage `json:"body"`
}

// CallResult is the response to a decided call, allowed or denied. Output is
// untrusted data: it is whatever the file or command produced.
type CallResult struct {
	CallID        string  `json:"call_id"`
	Verdict       Verdict `json:"verdict"`
	Reason        Reason  `json:"reason"`
	OK            bool    `json:"ok"`
	Output        *string `json:"output,omitempty"`
	OutputB64     string  `json:"output_b64,omitempty"`
	Stderr        string  `json:"stderr,omitempty"`
	Truncated     bool    `json:"truncated"`
	Bytes         int64   `json:"bytes"`
	ExitCode      *int    `json:"exit_code,omitempty"`
	Resource      string  `json:"resource,omitempty"`
	PolicyVersion string  `json:"policy_version,omitempty"`
	DurationMS    float64 `json:"duration_ms"`
	ApprovalID    string  `json:"approval_id,omitempty"`
	// SHA256 is a write's new content digest (chain it as the next
	// if_match), or what a delete removed.
	SHA256 string `json:"sha256,omitempty"`
	// Durable is set for writes and deletes that committed: false when the
	// directory fsync failed after the commit (reason not_durable).
	Durable *bool `json:"durable,omitempty"`
	// Signal names the signal that ended a command killed from outside
	// sluice (reason killed), e.g. "SIGKILL".
	Signal string `json:"signal,omitempty"`
	// HTTPStatus and ContentType are a fetch's or post's response's.
	HTTPStatus  int    `json:"http_status,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	// Size is a read file's whole size in bytes, whatever part of it the
	// output holds; NextOffset the line to read from next when a limit
	// or max_bytes cut the output.
	Size       *int64 `json:"size,omitempty"`
	NextOffset *int64 `json:"next_offset,omitempty"`
	// Changes is what a command with writes changed in its scratch layer
	// (docs/design.md §4, "Commands that write"), each change with
	// whether it committed; Committed says the whole changeset did.
	// Dropped counts what the command wrote that keep did not choose.
	Changes   []Change `json:"changes,omitempty"`
	Committed *bool    `json:"committed,omitempty"`
	Dropped   int      `json:"dropped,omitempty"`
	// Detail says more of a denial than its reason code where the code
	// alone does not name the fix: for invalid_args, what is wrong with
	// the args ("argv is required: this tool has 3 command patterns; …").
	// Never under deny_detail "opaque".
	Detail string `json:"detail,omitempty"`
	// ApprovalNote is the note the approver gave deciding this call
	// (sluice approve|deny ID --note TEXT), approved or denied.
	ApprovalNote string `json:"approval_note,omitempty"`
	// Redacted counts the secrets replaced by "[REDACTED:kind]" in what
	// the call returned (the tool's redact key; docs/security.md,
	// "Redaction").
	Redacted int `json:"redacted,omitempty"`
	// Source says where an allowed call's content came from, and that it
	// is untrusted data (docs/api.md, "Provenance: source"); nil for a
	// denied or pending call, from which nothing came.
	Source *Source `json:"source,omitempty"`
}

// CacheCleared answers POST /v1/caches/{tool}/clear: how many caches
// (one per principal and cache path) were dropped; AllPrincipals when an
// approver cleared everyone's.
type CacheCleared struct {
	Tool          string `json:"tool"`
	Cleared       int    `json:"cleared"`
	AllPrincipals bool   `json:"all_principals"`
}

// Change is one path of a command's changeset.
type Change struct {
	// Path is relative to the manifest's base, as a file tool's path.
	Path string `json:"path"`
	// Action is create, modify, delete or mkdir.
	Action string `json:"action"`
	// Bytes and SHA256 are the new content's (create, modify) or what a
	// delete removes; OldSHA256 is the file the command saw (modify,
	// delete), which a commit requires the host file still to be.
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256,omitempty"`
	OldSHA256 string `json:"old_sha256,omitempty"`
	Committed bool   `json:"committed"`
	// Reason is why this change refused the changeset, or why its
	// commit failed (precondition_failed: the host file changed).
	Reason Reason `json:"reason,omitempty"`
	// Rule is what refused it (tools.NAME.writes.never[0], …).
	Rule string `json:"rule,omitempty"`
	// Detail says why, where a reason code alone does not (a symlink in
	// the scratch layer, a host file changed while the command ran).
	Detail string `json:"detail,omitempty"`
}

// OpaqueDenial is what a caller sees of a denial under deny_detail "opaque".
type OpaqueDenial struct {
	CallID  string  `json:"call_id"`
	Verdict Verdict `json:"verdict"`
	Reason  Reason  `json:"reason"`
}

// Entry is one line of a list tool's output.
type Entry struct {
	Name string `json:"name"`
	Type string `json:"type"` // file, dir, symlink, other
	Size int64  `json:"size"`
	// Children are a directory's entries when the list went deeper
	// (args.depth above 1).
	Children []Entry `json:"children,omitempty"`
}

// Stat is the JSON document a stat tool returns as its output.
type Stat struct {
	Type  Kind   `json:"type"`
	Size  int64  `json:"size"`
	Mode  string `json:"mode"`  // permission bits in octal, "0644"
	MTime string `json:"mtime"` // RFC 3339, nanoseconds, UTC
	// SHA256 is a regular file's digest, up to 64 MiB.
	SHA256 string `json:"sha256,omitempty"`
}

// SearchMatch is one hit of a search tool: a path relative to the
// searched directory, and for a content search the line and its number.
type SearchMatch struct {
	Path string `json:"path"`
	Line int    `json:"line,omitempty"`
	Text string `json:"text,omitempty"`
}

// SearchResults is the JSON document a search tool returns as its output.
type SearchResults struct {
	Matches   []SearchMatch `json:"matches"`
	Truncated bool          `json:"truncated"`
}

// Listing is the JSON document a list tool returns as its output.
type Listing struct {
	Entries   []Entry `json:"entries"`
	Truncated bool    `json:"truncated"`
}

// Stream event kinds.
const (
	EventDecision = "decision"
	EventOutput   = "output"
	EventResult   = "result"
)

// DecisionEvent is the first line of a streamed call (and, for a call that
// waited for a human, the line that announces the final verdict).
type DecisionEvent struct {
	Event      string  `json:"event"`
	CallID     string  `json:"call_id"`
	Verdict    Verdict `json:"verdict"`
	Reason     Reason  `json:"reason"`
	ApprovalID string  `json:"approval_id,omitempty"`
	// ExpiresAt is a pending decision's: when the wait for a human ends
	// (RFC 3339), so that a caller can say how long it may wait.
	ExpiresAt string `json:"expires_at,omitempty"`
}

// OutputEvent carries bytes as they arrive; Data when they are UTF-8, else
// DataB64.
type OutputEvent struct {
	Event   string `json:"event"`
	Stream  string `json:"stream"`
	Data    string `json:"data,omitempty"`
	DataB64 string `json:"data_b64,omitempty"`
}

// ResultEvent is the last line of a streamed call: the CallResult fields
// without the output, which went out in OutputEvents.
type ResultEvent struct {
	Event string `json:"event"`
	CallResult
}

// Event is any streamed line, for decoding: read Event, then the fields of
// that kind.
type Event struct {
	Event   string `json:"event"`
	Stream  string `json:"stream,omitempty"`
	Data    string `json:"data,omitempty"`
	DataB64 string `json:"data_b64,omitempty"`
	// ExpiresAt is a pending decision's (DecisionEvent.ExpiresAt).
	ExpiresAt string `json:"expires_at,omitempty"`
	CallResult
	// Raw is the line as the daemon sent it.
	Raw json.RawMessage `json:"-"`
}

// Health is the body of GET /v1/health.
type Health struct {
	// Status is "ok", or "degraded" when the audit ledger cannot be
	// written (every call is then denied audit_unavailable).
	Status string `json:"status"`
	// Audit is "ok" or "degraded", with AuditError saying why.
	Audit         string `json:"audit,omitempty"`
	AuditError    string `json:"audit_error,omitempty"`
	Version       string `json:"version"`
	PolicyVersion string `json:"policy_version"`
}

// Tool describes one tool in GET /v1/tools, ready to hand to a model as a
// function definition.
type Tool struct {
	Name        string          `json:"name"`
	Operation   Operation       `json:"operation"`
	Description string          `json:"description"`
	ArgsSchema  json.RawMessage `json:"args_schema"`
	// Network says the tool reaches the network: a fetch or post, or a
	// command with egress (through sluiced's proxy, to allowed hosts).
	Network bool `json:"network,omitempty"`
	// Hints are what the tool's operation says of its effects, as MCP's
	// tool annotations carry them (sluice mcp passes them on).
	Hints ToolHints `json:"hints"`
}

// ToolHints say what calling a tool may do, for a client that shows or
// schedules calls (MCP's readOnlyHint, destructiveHint, idempotentHint;
// openWorldHint is Tool.Network).
type ToolHints struct {
	// ReadOnly: the call changes nothing outside sluiced.
	ReadOnly bool `json:"read_only"`
	// Destructive: the call may change or remove what exists (a write, a
	// delete, a move); false for one that only adds.
	Destructive bool `json:"destructive"`
	// Idempotent: calling it again with the same args has no further
	// effect.
	Idempotent bool `json:"idempotent"`
}

// Tools is the body of GET /v1/tools.
type Tools struct {
	Tools []Tool `json:"tools"`
}

// Error codes of non-decision errors.
const (
	ErrBadRequest       = "bad_request"
	ErrTooLarge         = "too_large"
	ErrNotFound         = "not_found"
	ErrMethodNotAllowed = "method_not_allowed"
	ErrForbidden        = "forbidden"
	ErrInternal         = "internal_error"
	ErrUnavailable      = "unavailable"
)

// ErrorBody is the body of every non-decision error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what was wrong with a request.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Approval is a call parked until an approver decides it.
type Approval struct {
	ApprovalID string          `json:"approval_id"`
	CallID     string          `json:"call_id"`
	Principal  string          `json:"principal"`
	Tool       string          `json:"tool"`
	Args       json.RawMessage `json:"args"` // as recorded in the ledger: no file bodies
	Task       string          `json:"task,omitempty"`
	ExpiresAt  string          `json:"expires_at"` // RFC 3339
	// Change is what the call would do, for the approver to read: the
	// approval is bound to it (a write's content digest).
	Change *ApprovalChange `json:"change,omitempty"`
	// Approvers is how many distinct approver principals must approve
	// the call (the tool's approvers); ApprovedBy who has (api/approval.go).
	Approvers  int      `json:"approvers,omitempty"`
	ApprovedBy []string `json:"approved_by,omitempty"`
	// Token is the delegation token the call was made with, if any: the
	// principal above is its minter, whose rights the token narrowed
	// (docs/tokens.md); a sub-agent's call, not the principal's own.
	Token *ApprovalToken `json:"token,omitempty"`
}

// ApprovalToken names the delegation token a parked call was made with.
type ApprovalToken struct {
	ID      string `json:"id"`
	Subject string `json:"subject,omitempty"`
}

// ApprovalChange shows an approver what a parked call would change, as
// the call's operation renders it (docs/design.md, "An operation is one
// unit"): a client shows Summary, then Current and New, then Body or
// Diff, whatever the operation, without knowing the operation.
//
// Every string in it comes from the agent. A client that writes it to a
// terminal escapes what a terminal would act on or not draw (controls,
// escape sequences, bidi and zero-width characters, invalid UTF-8) and
// warns when HiddenChars is not zero (docs/security.md, "The third
// review").
type ApprovalChange struct {
	// Kind is the operation that rendered the change (write, post, …).
	Kind Operation `json:"kind,omitempty"`
	// Summary is what the operation shows first, in order: a post's
	// method and URL, a file tool's path, a command's argv (quoted as a
	// shell reads it back).
	Summary []ChangeField `json:"summary,omitempty"`
	// HiddenChars counts the characters in Summary, Diff and Body that a
	// terminal acts on or does not draw: a client shows them escaped and
	// warns that the change contains them.
	HiddenChars int `json:"hidden_chars,omitempty"`
	// Diff is a unified diff of a write against the file's current
	// content (bounded; DiffTruncated says it was cut). Empty for binary
	// content, which is described by the sizes and digests alone.
	Diff          string `json:"diff,omitempty"`
	DiffTruncated bool   `json:"diff_truncated,omitempty"`
	Binary        bool   `json:"binary,omitempty"`
	// Current is the file as it is now (absent: it does not exist, unless
	// CurrentUnknown: it could not be looked at now, e.g. it is not a
	// regular file or the tool's root is gone; the write's if_match is
	// still checked when it commits).
	Current        *FileState `json:"current,omitempty"`
	CurrentUnknown bool       `json:"current_unknown,omitempty"`
	// New is what a write would leave.
	New *FileState `json:"new,omitempty"`
	// Argv is what an execute call would run.
	Argv []string `json:"argv,omitempty"`
	// URL is where a post or fetch goes (also in Summary).
	URL string `json:"url,omitempty"`
	// Body is what a post would send, whole, as the agent gave it (the
	// ledger keeps only its digest); BodyBytes and BodySHA256 are its
	// length and digest, what an approval of it binds.
	Body       json.RawMessage `json:"body,omitempty"`
	BodyBytes  int64           `json:"body_bytes,omitempty"`
	BodySHA256 string          `json:"body_sha256,omitempty"`
	// Changes is a command's whole changeset, every path listed (every
	// deletion first, never collapsed); Diff then holds the unified
	// diffs of its text files.
	Changes []Change `json:"changes,omitempty"`
}

// ChangeField is one line of an approval's summary: "url" and the URL.
type ChangeField struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// FileState is a file's size and content digest (no digest for a file
// over the 64 MiB hash cap).
type FileState struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
}

// Approvals is the body of GET /v1/approvals.
type Approvals struct {
	Approvals []Approval `json:"approvals"`
}

// ApprovalDecision is the body of POST /v1/approvals/{id}.
type ApprovalDecision struct {
	Approve bool          `json:"approve"`
	Note    string        `json:"note,omitempty"`
	Grant   *GrantRequest `json:"grant,omitempty"` // with approve: later calls too (api/approval.go)
}

// ApprovalOutcome answers POST /v1/approvals/{id}.
type ApprovalOutcome struct {
	ApprovalID string `json:"approval_id"`
	CallID     string `json:"call_id"`
	Approved   bool   `json:"approved"`
	// Waiting: this approval counted, and the call still waits for more
	// approvers (Approvers in all; ApprovedBy so far). Grant is what a
	// completing approval granted (api/approval.go).
	Waiting    bool     `json:"waiting,omitempty"`
	Approvers  int      `json:"approvers,omitempty"`
	ApprovedBy []string `json:"approved_by,omitempty"`
	Grant      *Grant   `json:"grant,omitempty"`
}

// TaskCancel answers POST /v1/tasks/{task}/cancel.
type TaskCancel struct {
	Task       string `json:"task"`
	Generation uint64 `json:"generation"`
	Ended      int    `json:"ended"` // calls in flight it ended
}

// CallCancel answers POST /v1/calls/{call_id}/cancel: the call was told to
// end; its result (reason cancelled) follows on its own stream and in the
// ledger.
type CallCancel struct {
	CallID string `json:"call_id"`
}

// Daemon event kinds, on GET /v1/events.
const (
	// DaemonEventSubscribed is the first line: the follower is subscribed,
	// and PolicyVersion is the version in force.
	DaemonEventSubscribed = "subscribed"
	// DaemonEventPolicyLoaded: a reload put PolicyVersion in force (the
	// tools a principal may call may have changed).
	DaemonEventPolicyLoaded = "policy_loaded"
	// DaemonEventDropped: the follower fell behind and the stream ends;
	// subscribe again (and re-read what may have changed).
	DaemonEventDropped = "dropped"
)

// DaemonEvent is one line of GET /v1/events.
type DaemonEvent struct {
	Event         string `json:"event"`
	PolicyVersion string `json:"policy_version,omitempty"`
	Message       string `json:"message,omitempty"`
	// Approval is an approval_parked or approval_decided event's
	// (api/approval.go).
	Approval *ApprovalEvent `json:"approval,omitempty"`
}

// ErrConflict: the approval was already decided, or does not exist.
const ErrConflict = "conflict"
