package authz

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/egress/netpolicy"
	"github.com/sluicehq/sluice/internal/secretscan"
	"github.com/sluicehq/sluice/internal/strictjson"
)

// Defaults from docs/manifest.md and docs/sandbox.md.
const (
	DefaultMaxBytes  = 65536
	DefaultTimeoutMS = 30000
	DefaultMemoryMB  = 512
	DefaultPids      = 256
	DefaultPool      = 2
	// DefaultMaxOpenFiles is how many files one container may hold open
	// through its tool's view (max_open_files).
	DefaultMaxOpenFiles = 256
	// maxMaxOpenFiles bounds max_open_files: each open file of a view is
	// an fd of sluiced's own.
	maxMaxOpenFiles = 65536
	// DefaultApprovalTimeoutMS is how long a parked call waits (5 min).
	DefaultApprovalTimeoutMS = 300_000
	// DefaultFileMode is the mode of files a write creates.
	DefaultFileMode = 0o644
	// DefaultDirMode is the mode of directories a mkdir makes.
	DefaultDirMode = 0o755
	// MaxManifestBytes bounds what Parse reads: a manifest is hand-written config.
	MaxManifestBytes = 4 << 20
	// maxMaxBytes bounds a tool's output cap so one call cannot ask the
	// daemon to buffer an unbounded amount.
	maxMaxBytes = 64 << 20
)

// Manifest is a validated schema_version 1 manifest. Build it with Parse;
// a Manifest that did not come from Parse is not valid.
type Manifest struct {
	SchemaVersion int                   `json:"schema_version" toml:"schema_version"`
	Base          string                `json:"base,omitempty" toml:"base"`
	DenyDetail    string                `json:"deny_detail,omitempty" toml:"deny_detail"`
	Principals    map[string]*Principal `json:"principals,omitempty" toml:"principals"`
	Tools         map[string]*Tool      `json:"tools" toml:"tools"`
	// Redact is redaction for every tool (redact.go); absent: none.
	Redact *Redact `json:"redact,omitempty" toml:"redact"`

	// BaseDir is Base made absolute against the manifest's directory.
	BaseDir string `json:"-" toml:"-"`
	// Version is "sha256:" + hex of the canonical form.
	Version string `json:"-" toml:"-"`
	// Canonical is the canonical JSON form the version is computed over.
	Canonical []byte `json:"-" toml:"-"`
}

// Principal maps peer credentials to a name and the tools it may call.
type Principal struct {
	UIDs     []uint32 `json:"uids,omitempty" toml:"uids"`
	GIDs     []uint32 `json:"gids,omitempty" toml:"gids"`
	Tools    []string `json:"tools" toml:"tools"`
	Approver bool     `json:"approver,omitempty" toml:"approver"`
	// Units and Cgroups name a workload (workload.go): systemd unit globs
	// and cgroup v2 path globs, matched against the peer's cgroup.
	Units   []string `json:"units,omitempty" toml:"units"`
	Cgroups []string `json:"cgroups,omitempty" toml:"cgroups"`
	// Rate and DenialBudget are its budgets (budget.go); nil: none.
	Rate         *Rate         `json:"rate,omitempty" toml:"rate"`
	DenialBudget *DenialBudget `json:"denial_budget,omitempty" toml:"denial_budget"`
}

// Tool is one tool's rule. Execute-only and write-only keys are validated
// here even where the daemon does not run that operation yet.
type Tool struct {
	Operation   api.Operation     `json:"operation" toml:"operation"`
	Description string            `json:"description,omitempty" toml:"description"`
	Roots       []string          `json:"roots,omitempty" toml:"roots"`
	Never       []string          `json:"never,omitempty" toml:"never"`
	MaxBytes    int64             `json:"max_bytes,omitempty" toml:"max_bytes"`
	Approval    api.ApprovalRule  `json:"approval,omitempty" toml:"approval"`
	Commands    [][]CommandArg    `json:"commands,omitempty" toml:"commands"` // argv patterns (op_execute_pattern.go)
	Examples    *CommandExamples  `json:"examples,omitempty" toml:"examples"` // checked against Commands at load
	Mounts      []string          `json:"mounts,omitempty" toml:"mounts"`
	Cwd         string            `json:"cwd,omitempty" toml:"cwd"`
	Env         map[string]string `json:"env,omitempty" toml:"env"`
	TimeoutMS   int64             `json:"timeout_ms,omitempty" toml:"timeout_ms"`
	MemoryMB    int64             `json:"memory_mb,omitempty" toml:"memory_mb"`
	Pids        int64             `json:"pids,omitempty" toml:"pids"`
	CPUs        float64           `json:"cpus,omitempty" toml:"cpus"`
	Seccomp     string            `json:"seccomp,omitempty" toml:"seccomp"`
	Pool        *int              `json:"pool,omitempty" toml:"pool"`
	// PoolMax is how far the pool grows under load (see EffectivePoolMax).
	PoolMax *int `json:"pool_max,omitempty" toml:"pool_max"`
	// MaxOpenFiles bounds the files one container holds open through
	// its view (each one an fd of sluiced's); EMFILE beyond it.
	MaxOpenFiles int64 `json:"max_open_files,omitempty" toml:"max_open_files"`
	// ApprovalTimeoutMS bounds how long a call waits for a human.
	ApprovalTimeoutMS int64 `json:"approval_timeout_ms,omitempty" toml:"approval_timeout_ms"`
	// Approvers and ApprovalWhen: how many distinct approver principals
	// approve one call, and which calls wait at all (approval_scale.go).
	Approvers    int           `json:"approvers,omitempty" toml:"approvers"`
	ApprovalWhen *ApprovalWhen `json:"approval_when,omitempty" toml:"approval_when"`
	// Mode is which write modes calls may use: create, overwrite or
	// create_or_overwrite (all; the default).
	Mode api.WriteMode `json:"mode,omitempty" toml:"mode"`
	// Hosts, Schemes, MaxRedirects, AllowedHeaders and
	// InsecureAllowPrivate are a fetch tool's (docs/egress.md); Webhooks
	// and MaxRequestBytes a post tool's (with Schemes and
	// InsecureAllowPrivate). timeout_ms bounds a whole fetch or post.
	Hosts                []string `json:"hosts,omitempty" toml:"hosts"`
	Schemes              []string `json:"schemes,omitempty" toml:"schemes"`
	MaxRedirects         *int     `json:"max_redirects,omitempty" toml:"max_redirects"`
	AllowedHeaders       []string `json:"allowed_headers,omitempty" toml:"allowed_headers"`
	InsecureAllowPrivate bool     `json:"insecure_allow_private,omitempty" toml:"insecure_allow_private"`
	Webhooks             []string `json:"webhooks,omitempty" toml:"webhooks"`
	MaxRequestBytes      int64    `json:"max_request_bytes,omitempty" toml:"max_request_bytes"`
	// Credentials are a fetch or post tool's: by exact host, the header
	// sluiced adds to every request to it (credentials.go).
	Credentials map[string]*Credential `json:"credentials,omitempty" toml:"credentials"`
	// FileMode is the octal permission of files a write creates ("0644").
	FileMode string `json:"file_mode,omitempty" toml:"file_mode"`
	// DirMode is the octal permission of directories a mkdir makes
	// ("0755", the default).
	DirMode string `json:"dir_mode,omitempty" toml:"dir_mode"`
	// Egress is what an execute tool's commands may reach through
	// sluiced's proxy; nil: no network at all.
	Egress *ExecEgress `json:"egress,omitempty" toml:"egress"`
	// HardLinks is what a tool with never globs does with a regular
	// file that has more than one name (st_nlink > 1): "refuse" (the
	// default) or "allow", which weakens never: another name of the
	// file, which no check can find, may be never-listed (see
	// RefusesHardLinks).
	HardLinks string `json:"hard_links,omitempty" toml:"hard_links"`
	// Writes is what an execute tool's commands may change, in a
	// scratch layer committed through policy as a changeset; nil: its
	// mounts are read-only (op_execute_writes.go).
	Writes *ExecWrites `json:"writes,omitempty" toml:"writes"`
	// Cache are container paths backed by a sluice-owned directory per
	// (tool, principal), read-write, capped at CacheMB (see
	// EffectiveCacheMB), never part of a changeset.
	Cache   []string `json:"cache,omitempty" toml:"cache"`
	CacheMB int64    `json:"cache_mb,omitempty" toml:"cache_mb"`
	// Redact is this tool's redaction, over the manifest's (redact.go).
	Redact *Redact `json:"redact,omitempty" toml:"redact"`

	idx *toolIndex // built by Parse; see index.go
	// scan is the tool's compiled redaction (nil: none), built by
	// validateRedact.
	scan *secretscan.Scanner
	wt   *Tool // WritesTool, built by Parse
	// net is a fetch or post tool's network policy, built by its
	// validator (netpolicy.NewPolicy), so a bad entry is a manifest error.
	net *netpolicy.Policy
}

// EffectiveMaxBytes is max_bytes with its default applied.
func (t *Tool) EffectiveMaxBytes() int64 {
	if t.MaxBytes == 0 {
		return DefaultMaxBytes
	}
	return t.MaxBytes
}

// Values of hard_links.
const (
	HardLinksRefuse = "refuse"
	HardLinksAllow  = "allow"
)

// RefusesHardLinks reports whether t refuses a regular file with more
// than one link: it has never globs and hard_links is not "allow". A
// hard link to .env under an innocent name is the same file, and the
// kernel names no file's other links, so never cannot be checked on
// them: file tools answer unsupported_file_type, and its view refuses
// to open it.
func (t *Tool) RefusesHardLinks() bool {
	return len(t.Never) > 0 && t.HardLinks != HardLinksAllow
}

// EffectiveMaxOpenFiles is max_open_files with its default applied.
func (t *Tool) EffectiveMaxOpenFiles() int64 {
	if t.MaxOpenFiles == 0 {
		return DefaultMaxOpenFiles
	}
	return t.MaxOpenFiles
}

// EffectivePool is pool with its default applied.
func (t *Tool) EffectivePool() int {
	if t.Pool == nil {
		return DefaultPool
	}
	return *t.Pool
}

// EffectivePoolMax is pool_max with its default applied: twice the pool
// (at most 64), so 0 with pool 0 (always cold).
func (t *Tool) EffectivePoolMax() int {
	if t.PoolMax == nil {
		return max(t.EffectivePool(), min(2*t.EffectivePool(), maxPool))
	}
	return *t.PoolMax
}

// maxPool bounds pool and pool_max.
const maxPool = 64

// ErrInvalidManifest is wrapped by every validation error.
var ErrInvalidManifest = errors.New("invalid manifest")

// ManifestError names the key at fault and how to fix it.
type ManifestError struct {
	Key string // e.g. tools.read_file.roots[1]
	Msg string
	// File is the manifest's name, set by ParseFile; Line and Col are
	// where in it the error is (0: not known; Col 0: the line only).
	// With a File, Error says FILE:LINE:COL: KEY: MSG, as compilers do.
	File      string
	Line, Col int

	at   int    // 1 + the byte offset in the JSON document; 0: unknown
	near string // a TOML error's line is of this enclosing key
}

func (e *ManifestError) Error() string {
	where := "manifest"
	if e.File != "" {
		where = e.File
		if e.Line > 0 {
			where += ":" + strconv.Itoa(e.Line)
			if e.Col > 0 {
				where += ":" + strconv.Itoa(e.Col)
			}
		}
	}
	if e.Key == "" {
		return where + ": " + e.Msg
	}
	return where + ": " + e.Key + ": " + e.Msg
}

func (e *ManifestError) Unwrap() error { return ErrInvalidManifest }

func merr(key, format string, a ...any) error {
	return &ManifestError{Key: key, Msg: fmt.Sprintf(format, a...)}
}

// Parse decodes and validates a manifest. dir is the manifest's directory:
// a relative or absent base resolves against it. Parse does no I/O beyond
// reading r; whether roots exist is the daemon's concern.
func Parse(r io.Reader, dir string) (*Manifest, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	if len(data) > MaxManifestBytes {
		return nil, merr("", "larger than %d bytes", MaxManifestBytes)
	}
	m, err := parseJSON(data, dir)
	if err != nil {
		return nil, positioned(err, data)
	}
	return m, nil
}

// parseJSON is Parse of the document data, its errors not yet placed
// (ParseTOML places them in the TOML it read).
func parseJSON(data []byte, dir string) (*Manifest, error) {
	// schema_version first: it decides how the rest is read.
	// A map keeps keys as written: a struct would match Schema_Version.
	var head map[string]json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&head); err != nil {
		return nil, syntaxError(data)
	}
	sv, ok := head["schema_version"]
	if !ok {
		return nil, merr("schema_version", "missing; add \"schema_version\": 1")
	}
	var v int
	if err := json.Unmarshal(sv, &v); err != nil || v != 1 {
		return nil, merr("schema_version", "is %s; this sluice reads only 1", string(sv))
	}
	// Keys first, so that an unknown key is named with its path: every
	// key at every depth must be spelled exactly as documented, once
	// (encoding/json alone matches names ignoring case and lets a repeated
	// key win; docs/security.md, "The third review"). ParseTOML comes
	// through here too.
	if json.Valid(data) {
		if err := strictjson.CheckKeys(data, reflect.TypeOf((*Manifest)(nil))); err != nil {
			var ke *strictjson.KeyError
			if errors.As(err, &ke) {
				if rerr := refineCommandKeyError(data, ke); rerr != nil {
					return nil, rerr
				}
			}
			return nil, keyError(err)
		}
	}
	var err error
	m := new(Manifest)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, typeError(data, te)
		}
		return nil, merr("", "%s", describeDecodeError(err))
	}
	if dec.More() {
		return nil, merr("", "trailing data after the manifest object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, merr("", "trailing data after the manifest object")
	}
	if !json.Valid(data) { // the checks above fail first; fail closed
		return nil, merr("", "not valid JSON")
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("manifest directory %q must be absolute", dir)
	}
	for _, check := range validators {
		if err := check(m); err != nil {
			return nil, err
		}
	}
	m.BaseDir = filepath.Clean(dir)
	if m.Base != "" {
		if filepath.IsAbs(m.Base) {
			m.BaseDir = filepath.Clean(m.Base)
		} else {
			m.BaseDir = filepath.Join(dir, m.Base)
		}
	}
	for name, t := range m.Tools {
		t.idx = buildIndex(name, t)
		prepareWrites(name, t)
	}
	if err := checkExamples(m); err != nil {
		return nil, err
	}
	if err := checkCacheMounts(m); err != nil {
		return nil, err
	}
	canon, err := canonical(m)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(canon)
	m.Canonical = canon
	m.Version = "sha256:" + hex.EncodeToString(sum[:])
	return m, nil
}

// keyError is a strictjson.CheckKeys error as a ManifestError.
func keyError(err error) error {
	var ke *strictjson.KeyError
	if !errors.As(err, &ke) {
		return merr("", "%v", err)
	}
	if ke.Msg == strictjson.MsgRepeated {
		return &ManifestError{Key: ke.Path, Msg: "given twice; a key appears once", at: ke.Offset + 1}
	}
	return &ManifestError{Key: ke.Path, Msg: "unknown key (schema_version 1 has no such key; check its spelling: keys are case-sensitive)", at: ke.Offset + 1}
}

func describeDecodeError(err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, "json: unknown field ") {
		return "unknown key " + strings.TrimPrefix(msg, "json: unknown field ") + " (schema_version 1 has no such key; check its spelling)"
	}
	return msg
}

// canonical is the manifest re-encoded with sorted keys, no insignificant
// whitespace, and defaults left as written: two files that differ only in
// formatting or key order have one policy_version.
func canonical(m *Manifest) ([]byte, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var generic any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&generic); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(generic); err != nil { // maps encode with sorted keys
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// validators run in order; each returns the first problem it finds, naming
// the key and the fix (the shape of runc's configs/validate).
var validators = []func(*Manifest) error{
	validateTop,
	validatePrincipals,
	validateBudgets,
	validateTools,
	validateRedact,
	validateApprovers,
}

func validateTop(m *Manifest) error {
	switch m.DenyDetail {
	case "", "reason", "opaque":
	default:
		return merr("deny_detail", "is %q; use \"reason\" or \"opaque\"", m.DenyDetail)
	}
	if strings.ContainsRune(m.Base, 0) {
		return merr("base", "contains a NUL byte")
	}
	if len(m.Tools) == 0 {
		return merr("tools", "missing or empty; declare at least one tool")
	}
	return nil
}

func validateName(key, name string) error {
	if name == "" || len(name) > 64 {
		return merr(key, "name %q must be 1 to 64 characters", name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return merr(key, "name %q may use only letters, digits, '_', '-' and '.'", name)
		}
	}
	return nil
}

func validatePrincipals(m *Manifest) error {
	if m.Principals == nil {
		return nil
	}
	if len(m.Principals) == 0 {
		return merr("principals", "is empty; remove it (every peer is then principal \"local\") or declare one")
	}
	uidOwner := map[uint32]string{}
	gidOwner := map[uint32]string{}
	for _, name := range sortedKeys(m.Principals) {
		p := m.Principals[name]
		key := "principals." + name
		if err := validateName(key, name); err != nil {
			return err
		}
		if p == nil {
			return merr(key, "is null; give it {\"uids\":[…],\"tools\":[…]}")
		}
		if err := validateWorkload(key, p); err != nil {
			return err
		}
		if p.workload() {
			// A workload principal's uids and gids narrow it; they are
			// not selectors of their own, so they may repeat.
			goto tools
		}
		if len(p.UIDs) == 0 && len(p.GIDs) == 0 {
			return merr(key, "matches nobody; give it \"uids\", \"gids\", \"units\" or \"cgroups\"")
		}
		for i, u := range p.UIDs {
			if other, ok := uidOwner[u]; ok {
				return merr(fmt.Sprintf("%s.uids[%d]", key, i), "uid %d is also in principals.%s; a uid maps to one principal", u, other)
			}
			uidOwner[u] = name
		}
		for i, g := range p.GIDs {
			if other, ok := gidOwner[g]; ok {
				return merr(fmt.Sprintf("%s.gids[%d]", key, i), "gid %d is also in principals.%s; a gid maps to one principal", g, other)
			}
			gidOwner[g] = name
		}
	tools:
		if p.Tools == nil {
			return merr(key+".tools", "missing; list tool names, [\"*\"] for all, or [] for none")
		}
		for i, t := range p.Tools {
			k := fmt.Sprintf("%s.tools[%d]", key, i)
			if t == "*" {
				if len(p.Tools) != 1 {
					return merr(k, "\"*\" must stand alone")
				}
				continue
			}
			if _, ok := m.Tools[t]; !ok {
				return merr(k, "names tool %q, which tools does not declare", t)
			}
		}
	}
	return nil
}

func validateTools(m *Manifest) error {
	for _, name := range sortedKeys(m.Tools) {
		t := m.Tools[name]
		key := "tools." + name
		if err := validateName(key, name); err != nil {
			return err
		}
		if t == nil {
			return merr(key, "is null; give it an \"operation\"")
		}
		if err := validateTool(key, t); err != nil {
			return err
		}
	}
	return nil
}

// A validator checks one concern of a tool; validateTool runs the common
// ones, then its operation's, in order (runc's validator list). Each
// message names the key and the fix.
type validator func(key string, t *Tool) error

var commonValidators = []validator{validateDescription, validateMaxBytes, validateApproval, validateApprovalScale, validateNever, validateHardLinks}

// validateTool runs the common validators, then the operation's own, then
// refuses keys of other operations.
func validateTool(key string, t *Tool) error {
	o := LookupOp(t.Operation)
	switch {
	case t.Operation == "":
		return merr(key+".operation", "missing; use %s", operationList())
	case o == nil:
		return merr(key+".operation", "is %q; use %s", t.Operation, operationList())
	}
	for _, vs := range [][]validator{commonValidators, o.validate} {
		for _, v := range vs {
			if err := v(key, t); err != nil {
				return err
			}
		}
	}
	return o.ownKeys(key, t)
}

func validateDescription(key string, t *Tool) error {
	if len(t.Description) > 1024 {
		return merr(key+".description", "longer than 1024 characters")
	}
	return nil
}

func validateMaxBytes(key string, t *Tool) error {
	if t.MaxBytes < 0 || t.MaxBytes > maxMaxBytes {
		return merr(key+".max_bytes", "is %d; use 1 to %d (default %d)", t.MaxBytes, maxMaxBytes, DefaultMaxBytes)
	}
	return nil
}

func validateApproval(key string, t *Tool) error {
	switch t.Approval {
	case "", api.ApprovalNone, api.ApprovalHuman:
	default:
		return merr(key+".approval", "is %q; use \"none\" or \"human\"", t.Approval)
	}
	if t.ApprovalTimeoutMS < 0 || t.ApprovalTimeoutMS > 7*24*3600_000 {
		return merr(key+".approval_timeout_ms", "is %d; use 1 to 604800000 (default %d)", t.ApprovalTimeoutMS, DefaultApprovalTimeoutMS)
	}
	if t.ApprovalTimeoutMS != 0 && t.Approval != api.ApprovalHuman && (t.Writes == nil || t.Writes.EffectiveCommit() != "approval") {
		return merr(key+".approval_timeout_ms", "applies only with \"approval\": \"human\" or writes.commit \"approval\"; remove it or set approval")
	}
	return nil
}

func validateNever(key string, t *Tool) error {
	for i, g := range t.Never {
		if err := validateGlob(g); err != nil {
			return merr(fmt.Sprintf("%s.never[%d]", key, i), "%q: %v", g, err)
		}
	}
	return nil
}

func validateHardLinks(key string, t *Tool) error {
	switch t.HardLinks {
	case "", HardLinksRefuse:
	case HardLinksAllow:
		if len(t.Never) == 0 && (t.Writes == nil || len(t.Writes.Never) == 0) {
			return merr(key+".hard_links", "applies only with never globs; remove it or add never")
		}
	default:
		return merr(key+".hard_links", "is %q; use \"refuse\" (the default) or \"allow\"", t.HardLinks)
	}
	return nil
}

func validateRoots(key string, t *Tool) error {
	if len(t.Roots) == 0 {
		return merr(key+".roots", "missing; a %s tool needs at least one root directory", t.Operation)
	}
	for i, r := range t.Roots {
		if err := validateRel(r); err != nil {
			return merr(fmt.Sprintf("%s.roots[%d]", key, i), "%q %v", r, err)
		}
	}
	return nil
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func validateRel(p string) error {
	switch {
	case p == "":
		return errors.New("is empty; name a directory relative to base")
	case strings.ContainsRune(p, 0):
		return errors.New("contains a NUL byte")
	case path.IsAbs(p):
		return errors.New("is absolute; name it relative to base (set \"base\" to move base)")
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return errors.New("leaves base; name a directory beneath base")
	}
	return nil
}

func validateGlob(g string) error {
	if g == "" || strings.ContainsRune(g, 0) {
		return errors.New("empty or contains NUL")
	}
	if strings.HasPrefix(g, "/") {
		return errors.New("is absolute; never globs match paths relative to the root")
	}
	for _, seg := range strings.Split(g, "/") {
		if seg == "**" {
			continue
		}
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("bad pattern: %v", err)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
