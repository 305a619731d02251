package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/api"
)

// Record kinds.
const (
	KindPolicyLoaded  = "policy_loaded"
	KindDecision      = "decision"
	KindApproval      = "approval"
	KindResult        = "result"
	KindTaskCancelled = "task_cancelled"
	KindRecovered     = "recovered"
	// KindTruncated: at start the ledger was found behind its anchor
	// (records were cut); the chain continues from what is left.
	KindTruncated = "truncated"
	// KindDropped summarizes decision records not written for a uid that
	// maps to no principal, over the rate limit.
	KindDropped = "dropped"
	// KindConnection is one connection a command made through sluiced's
	// egress proxy, recorded under its call when it ends.
	KindConnection = "connection"
	// KindChangeset is a command's changeset as it is about to commit:
	// every path with its old and new sha256, durable before the first
	// file changes (docs/design.md §4, "Commands that write").
	KindChangeset = "changeset"
	// KindBudgetReset is an approver's reset of a principal's budgets
	// (docs/api.md, POST /v1/budgets/{principal}/reset): its principal is
	// the approver, its detail names whose budget and what was cleared.
	KindBudgetReset = "budget_reset"
	// KindGrant is a grant an approver made with an approval: the calls
	// of one tool by one principal in one task that run without waiting
	// until it expires; each call it covers names it ("grant").
	KindGrant = "grant"
	// KindToken is a delegation token minted or revoked: its ref
	// ("token": id, minter, subject), what it narrows to in args (never
	// the token itself), and detail saying which and by whom.
	KindToken = "token"
)

// Record is one ledger line. Fields are declared in key order and "hash"
// is always the last member, so the line minus that member is the exact
// byte string the hash covers.
type Record struct {
	ApprovalID    string          `json:"approval_id,omitempty"`
	Args          json.RawMessage `json:"args,omitempty"`
	CallID        string          `json:"call_id,omitempty"`
	Changes       []api.Change    `json:"changes,omitempty"`
	Detail        string          `json:"detail,omitempty"`
	Egress        *Egress         `json:"egress,omitempty"`
	Grant         string          `json:"grant,omitempty"` // the grant that let a call run without approval
	Kind          string          `json:"kind"`
	Operation     api.Operation   `json:"operation,omitempty"`
	PolicyVersion string          `json:"policy_version,omitempty"`
	Prev          string          `json:"prev"`
	Principal     *Principal      `json:"principal,omitempty"`
	Reason        api.Reason      `json:"reason,omitempty"`
	Resolved      json.RawMessage `json:"resolved,omitempty"`
	Resource      string          `json:"resource,omitempty"`
	Result        *Result         `json:"result,omitempty"`
	Rule          string          `json:"rule,omitempty"`
	Seq           uint64          `json:"seq"`
	Task          string          `json:"task,omitempty"`
	Time          string          `json:"time"`
	Token         *TokenRef       `json:"token,omitempty"`
	Tool          string          `json:"tool,omitempty"`
	Verdict       api.Verdict     `json:"verdict,omitempty"`
	Hash          string          `json:"hash"`
}

// Principal is who made a call: the manifest's name and the peer's
// kernel-reported credentials.
type Principal struct {
	// Cgroup is the peer's cgroup v2 path when it could be read (docs/manifest.md, "units and cgroups").
	Cgroup string `json:"cgroup,omitempty"`
	GID    uint32 `json:"gid"`
	Name   string `json:"name"`
	PID    int32  `json:"pid"`
	UID    uint32 `json:"uid"`
}

// TokenRef names the delegation token a call presented (docs/tokens.md):
// its id, the subject it was minted for and the principal that minted it,
// whose rights (narrowed by the token) decided the call. The token itself
// is never recorded.
type TokenRef struct {
	ID      string `json:"id"`
	Minter  string `json:"minter"`
	Subject string `json:"subject,omitempty"`
}

// Egress is what a fetch, a post or a command's proxied connection did on
// the network: where it went and how much moved each way, never a body.
type Egress struct {
	// Addr is the address dialed (ip:port): what was checked and used,
	// never looked up again.
	Addr string `json:"addr,omitempty"`
	// BodyLen and BodySHA256 describe a post's body.
	BodyLen     int64       `json:"body_len,omitempty"`
	BodySHA256  string      `json:"body_sha256,omitempty"`
	BytesIn     int64       `json:"bytes_in"`
	BytesOut    int64       `json:"bytes_out"`
	ContentType string      `json:"content_type,omitempty"`
	Hops        []EgressHop `json:"hops,omitempty"` // each request of a redirect chain
	Method      string      `json:"method,omitempty"`
	Status      int         `json:"status,omitempty"` // the HTTP status
	// Target is the URL asked for (a fetch's first, a post's), or a
	// proxied connection's CONNECT authority or URL.
	Target string `json:"target,omitempty"`
}

// EgressHop is one request of a fetch's redirect chain, each authorized
// as a new URL.
type EgressHop struct {
	Addr   string `json:"addr,omitempty"`
	Rule   string `json:"rule,omitempty"`
	Status int    `json:"status,omitempty"`
	URL    string `json:"url"`
}

// Result is what an executed call did.
type Result struct {
	Bytes int64 `json:"bytes"`
	// Durable is false when a committed write or delete could not be made
	// durable (its directory fsync failed); absent otherwise.
	Durable    *bool   `json:"durable,omitempty"`
	DurationMS float64 `json:"duration_ms"`
	ExitCode   *int    `json:"exit_code,omitempty"`
	OK         bool    `json:"ok"`
	// Redacted counts the secrets replaced in what the call returned, by
	// kind (docs/audit.md): kinds and counts, never a value.
	Redacted map[string]int `json:"redacted,omitempty"`
	// SHA256 and Size describe the file a write left or a delete removed.
	SHA256 string `json:"sha256,omitempty"`
	// Signal names what killed a command from outside sluice.
	Signal    string `json:"signal,omitempty"`
	Size      int64  `json:"size,omitempty"`
	Truncated bool   `json:"truncated"`
}

// Genesis is the prev of the first record.
const Genesis = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

var hashKey = []byte(`,"hash":"`)

// encode serializes rec with its hash computed: the hash is sha256 over the
// record's JSON with the "hash" member removed (it is the last member, so
// that is the line up to `,"hash":` followed by `}`).
func encode(rec *Record) ([]byte, error) {
	line := appendRecord(make([]byte, 0, 1024), rec)
	line = append(line, '}')
	sum := sha256.Sum256(line)
	rec.Hash = "sha256:" + hex.EncodeToString(sum[:])
	line = append(line[:len(line)-1], hashKey...)
	line = append(line, rec.Hash...)
	line = append(line, '"', '}', '\n')
	return line, nil
}

// LineBytes is an upper bound on the bytes rec takes in the ledger once
// appended: its encoding with seq, prev, time and hash at their longest.
// Callers that keep a budget of audit bytes (the daemon's per-call one
// for proxied connections) count records with it before appending them.
func LineBytes(rec *Record) int {
	r := *rec
	r.Seq, r.Prev, r.Time = maxSeq, Genesis, "2006-01-02T15:04:05.999999999Z"
	return len(appendRecord(nil, &r)) + len(hashKey) + len(Genesis) + len("\"}\n")
}

// checkLine verifies one line's own hash and returns the decoded record.
func checkLine(line []byte) (*Record, error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	i := bytes.LastIndex(line, hashKey)
	if i < 0 || !bytes.HasSuffix(line, []byte(`"}`)) {
		return nil, errors.New("no trailing hash member")
	}
	claimed := string(line[i+len(hashKey) : len(line)-2])
	canon := append(append([]byte{}, line[:i]...), '}')
	sum := sha256.Sum256(canon)
	if want := "sha256:" + hex.EncodeToString(sum[:]); claimed != want {
		return nil, fmt.Errorf("hash mismatch (recorded %.20s…, computed %.20s…)", claimed, want)
	}
	var rec Record
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("not a ledger record: %v", err)
	}
	if rec.Hash != claimed {
		return nil, errors.New("hash member is not the last member")
	}
	return &rec, nil
}
